package admin

// `shared-resource-csi diagnose POD` (or `deployment/NAME`): for each share each shared volume of
// the pod mounts, one verdict, its evidence and the command that fixes it (docs/operating.md,
// "Diagnose"). It asks what the driver asks, in the driver's order of importance: does the share
// exist, are its files away (the driver's events, read through shareapi.FilesAfter, the table the
// relist's events are checked against), may the pod's service account `use` the share (a
// SubjectAccessReview the caller creates), may the driver read the source, does it exist, is it the
// object the share was made for (the relist's order), is the share Ready, is the driver pod on the
// pod's node Ready. It runs with the caller's kubeconfig and only reads (adminclient.go); a check
// the caller's permissions did not allow makes the verdict Undetermined, naming the permission,
// never a guess.

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// The verdicts, one per share of a volume.
const (
	verdictOK               = "OK"
	verdictInvalidVolume    = "InvalidVolume"
	verdictShareMissing     = "ShareMissing"
	verdictShareNotReady    = "ShareNotReady"
	verdictUseDenied        = "UseDenied"
	verdictDriverMayNotRead = "DriverMayNotRead"
	verdictSourceMissing    = "SourceMissing"
	verdictSourceReplaced   = "SourceReplaced"
	verdictDriverNotReady   = "DriverNotReady"
	verdictRevoked          = "Revoked"
	verdictShareReplaced    = "ShareReplaced"
	verdictNotRefreshed     = "NotRefreshed"
	verdictUndetermined     = "Undetermined"
)

// adminOptions are the flags diagnose and who-uses share.
type adminOptions struct {
	kubeconfig     string
	kubeContext    string
	namespace      string
	output         string // text or json
	driverNS       string
	driverAccounts string // NAMESPACE:NAME,... of the driver's service accounts
}

// shareVerdictReport is one share of one volume.
type shareVerdictReport struct {
	Volume      string   `json:"volume"`
	Share       string   `json:"share"` // secret/NAME or configmap/NAME
	Verdict     string   `json:"verdict"`
	Evidence    []string `json:"evidence"`
	Fix         string   `json:"fix,omitempty"`
	LastVersion string   `json:"lastVersion,omitempty"`
}

type podDiagnosis struct {
	Namespace      string               `json:"namespace"`
	Pod            string               `json:"pod"`
	Node           string               `json:"node,omitempty"`
	ServiceAccount string               `json:"serviceAccount"`
	Phase          string               `json:"phase"`
	Shares         []shareVerdictReport `json:"shares"`
}

type diagnoseReport struct {
	Pods         []podDiagnosis `json:"pods"`
	CallerLacked []string       `json:"callerLacked,omitempty"`
	Reads        []string       `json:"reads"`
}

// diagnoseTargets resolves POD or deployment/NAME to the pods to diagnose.
func diagnoseTargets(ctx context.Context, a *adminClient, ns, target string) ([]corev1.Pod, error) {
	kind, name, ok := strings.Cut(target, "/")
	if !ok {
		kind, name = "pod", target
	}
	switch strings.ToLower(kind) {
	case "pod", "pods", "po":
		p, err := a.getPod(ctx, ns, name)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
		return []corev1.Pod{*p}, nil
	case "deployment", "deployments", "deploy":
		d, err := a.getDeployment(ctx, ns, name)
		if err != nil {
			return nil, fmt.Errorf("deployment %s/%s: %w", ns, name, err)
		}
		raw, _, _ := unstructuredField(d.Object, "spec", "selector")
		var sel metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &sel); err != nil {
			return nil, fmt.Errorf("deployment %s/%s: its selector: %w", ns, name, err)
		}
		s, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil || s.Empty() {
			return nil, fmt.Errorf("deployment %s/%s: its selector %v cannot select pods", ns, name, err)
		}
		pods, err := a.listPods(ctx, ns, s.String(), "")
		if err != nil {
			return nil, fmt.Errorf("the pods of deployment %s/%s: %w", ns, name, err)
		}
		if len(pods) == 0 {
			return nil, fmt.Errorf("deployment %s/%s has no pods (selector %s)", ns, name, s)
		}
		return pods, nil
	}
	return nil, fmt.Errorf("%q: name a pod (POD or pod/POD) or a Deployment (deployment/NAME)", target)
}

func unstructuredField(obj map[string]any, fields ...string) (map[string]any, bool, error) {
	cur := obj
	for _, f := range fields {
		next, ok := cur[f].(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = next
	}
	return cur, true, nil
}

// diagnosePod judges every share of every shared volume of p.
func diagnosePod(ctx context.Context, a *adminClient, o *adminOptions, p *corev1.Pod) podDiagnosis {
	d := podDiagnosis{Namespace: p.Namespace, Pod: p.Name, Node: p.Spec.NodeName, ServiceAccount: podServiceAccount(p), Phase: string(p.Status.Phase)}
	vols := podShareVolumes(p)
	if len(vols) == 0 {
		return d
	}
	events, evErr := a.listEvents(ctx, p.Namespace, "involvedObject.uid="+string(p.UID))
	sortEvents(events)
	var driverPod *corev1.Pod
	var driverErr error
	if p.Spec.NodeName != "" {
		driverPod, driverErr = a.driverPodOn(ctx, o.driverNS, p.Spec.NodeName)
	}
	for _, v := range vols {
		refs, err := a.d.ShareAttributes(v.CSI.VolumeAttributes)
		var refresh bool
		if err == nil {
			refresh, err = a.d.Refreshes(v.CSI.VolumeAttributes)
		}
		if err != nil {
			d.Shares = append(d.Shares, shareVerdictReport{Volume: v.Name, Verdict: verdictInvalidVolume,
				Evidence: []string{err.Error()}, Fix: "fix the volume's volumeAttributes in the pod's spec (docs/reference.md, Volume attributes)"})
			continue
		}
		for _, ref := range refs {
			j := &shareJudgement{a: a, o: o, pod: p, ref: ref, refresh: refresh, events: events, evErr: evErr, driverPod: driverPod, driverErr: driverErr}
			r := j.judge(ctx)
			r.Volume, r.Share = v.Name, ref.String()
			d.Shares = append(d.Shares, r)
		}
	}
	return d
}

// shareJudgement is what diagnose knows of one share of one pod.
type shareJudgement struct {
	a         *adminClient
	o         *adminOptions
	pod       *corev1.Pod
	ref       shareapi.Ref
	refresh   bool // the volume is refreshed from its sources (refreshResource)
	events    []corev1.Event
	evErr     error
	driverPod *corev1.Pod
	driverErr error
	evidence  []string
	unknown   []string // checks the caller's permissions or the API did not allow
}

func (j *shareJudgement) say(format string, args ...any) {
	j.evidence = append(j.evidence, fmt.Sprintf(format, args...))
}

func (j *shareJudgement) couldNot(what string, err error) {
	j.unknown = append(j.unknown, what)
	j.say("could not %s: %v", what, err)
}

func (j *shareJudgement) verdict(v, fix string) shareVerdictReport {
	return shareVerdictReport{Verdict: v, Evidence: j.evidence, Fix: fix}
}

// judge gives the share's verdict: the first problem found, in the order of the file's comment.
func (j *shareJudgement) judge(ctx context.Context) shareVerdictReport {
	a, p, ref := j.a, j.pod, j.ref
	typeName := ref.Kind.TypeName()
	u, err := a.getShare(ctx, ref.Kind, ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		j.say("%s %q does not exist", typeName, ref.Name)
		return j.verdict(verdictShareMissing, fmt.Sprintf("kubectl get %s; a cluster admin creates %s %q (kubectl apply -f a %s naming the source), or fix the pod's volumeAttributes to name an existing share",
			ref.Kind.Resource(), typeName, ref.Name, typeName))
	case err != nil:
		j.couldNot(fmt.Sprintf("get %s %q", typeName, ref.Name), err)
		return j.undetermined()
	}
	sh, specErr := a.d.Share(ref.Kind, u)
	ready := a.d.readyOf(u)
	if ready != nil {
		j.say("%s %q: Ready=%s (%s): %s", typeName, ref.Name, ready.Status, ready.Reason, ready.Message)
	} else {
		j.say("%s %q has no Ready condition yet (the status controller writes it)", typeName, ref.Name)
	}

	if j.evErr != nil {
		// Without the pod's events a revoked volume cannot be told from a working one.
		j.couldNot("list the pod's events (whether its volume was revoked, the version it last received)", j.evErr)
	}
	allowed, reason, err := a.mayUse(ctx, p.Namespace, podServiceAccount(p), ref)
	reads := shareReads{share: sh, specErr: specErr, ready: ready, mayUse: allowed, useReason: reason, useErr: err,
		source: func() (src sourceFacts) {
			if !j.refresh { // the relist reads no source for a volume that does not refresh
				return src
			}
			src.uid, src.err = a.sourceUID(ctx, sh.Source)
			if first, _, _ := strings.Cut(j.o.driverAccounts, ","); first != "" {
				src.driverAccount = first
				src.mayRead, _, src.readErr = a.driverMayRead(ctx, first, sh.Source)
			}
			return src
		}}
	if r, done := j.decide(reads); done {
		return r
	}

	switch {
	case p.Spec.NodeName == "":
		j.say("the pod is not scheduled yet: no node, so no driver to ask")
	case j.driverErr != nil:
		j.couldNot(fmt.Sprintf("list the driver's pods in namespace %s", j.o.driverNS), j.driverErr)
	case j.driverPod == nil:
		j.say("no driver pod (%s) in namespace %s on node %s", driverPodSelector, j.o.driverNS, p.Spec.NodeName)
		return j.verdict(verdictDriverNotReady, fmt.Sprintf("kubectl -n %s get daemonset -l app.kubernetes.io/name=shared-resource-csi -o wide; kubectl describe node %s   (a taint the DaemonSet does not tolerate, or the driver installed in another namespace: --driver-namespace)", j.o.driverNS, p.Spec.NodeName))
	case !podReady(j.driverPod):
		j.say("driver pod %s/%s on node %s is not Ready (phase %s)", j.driverPod.Namespace, j.driverPod.Name, p.Spec.NodeName, j.driverPod.Status.Phase)
		return j.verdict(verdictDriverNotReady, fmt.Sprintf("kubectl -n %s describe pod %s; kubectl -n %s logs %s --all-containers", j.driverPod.Namespace, j.driverPod.Name, j.driverPod.Namespace, j.driverPod.Name))
	default:
		j.say("driver pod %s/%s on node %s is Ready", j.driverPod.Namespace, j.driverPod.Name, p.Spec.NodeName)
	}
	if ev := lastFailedMount(j.events); ev != nil && p.Status.Phase == corev1.PodPending {
		j.say("last FailedMount %s ago: %s", since(ev), printable(ev.Message))
	}
	if len(j.unknown) > 0 {
		return j.undetermined()
	}
	r := j.verdict(verdictOK, "")
	r.LastVersion = lastVersion(j.events, ref, j.evErr)
	return r
}

func (j *shareJudgement) undetermined() shareVerdictReport {
	return j.verdict(verdictUndetermined, "run it again as someone who may "+strings.Join(j.a.lacked, "; ")+" (the checks it could not make are above)")
}

// useGrantCommand is what lets the service account use the share (docs/operating.md, note 1):
// a Role applied from its JSON, since `kubectl create role` refuses the verb use on any resource
// but PodSecurityPolicies, then its RoleBinding.
func useGrantCommand(ns, sa string, ref shareapi.Ref) string {
	role := fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"use-%s","namespace":"%s"},"rules":[{"apiGroups":["%s"],"resources":["%s"],"resourceNames":["%s"],"verbs":["use"]}]}`,
		ref.Name, ns, shareapi.Group, ref.Kind.Resource(), ref.Name)
	return fmt.Sprintf("echo '%s' | kubectl apply -f - && kubectl create rolebinding use-%s -n %s --role=use-%s --serviceaccount=%s:%s",
		role, ref.Name, ns, ref.Name, ns, sa)
}

// readyOf is the share's Ready condition, or nil.
func (d Driver) readyOf(u *unstructured.Unstructured) *metav1.Condition {
	conds, err := d.Conditions(u)
	if err != nil {
		return nil
	}
	for i := range conds {
		if conds[i].Type == shareapi.ConditionReady {
			return &conds[i]
		}
	}
	return nil
}

// runDiagnose diagnoses the target's pods.
func runDiagnose(ctx context.Context, a *adminClient, o *adminOptions, target string) (*diagnoseReport, error) {
	pods, err := diagnoseTargets(ctx, a, o.namespace, target)
	if err != nil {
		return nil, err
	}
	rep := &diagnoseReport{}
	for i := range pods {
		rep.Pods = append(rep.Pods, diagnosePod(ctx, a, o, &pods[i]))
	}
	rep.CallerLacked, rep.Reads = a.lacked, a.readsSummary()
	return rep, nil
}

// printDiagnose writes the report for people. Every value passes through printable: a pod's
// attributes, a share's Ready message and events are others' text, and must not make lines of
// the report's own.
func printDiagnose(w *strings.Builder, rep *diagnoseReport) {
	for _, p := range rep.Pods {
		fmt.Fprintf(w, "pod %s/%s (node %s, service account %s, %s)\n", printable(p.Namespace), printable(p.Pod), printable(orDash(p.Node)), printable(p.ServiceAccount), printable(p.Phase))
		if len(p.Shares) == 0 {
			fmt.Fprintf(w, "  no volume of driver %s\n", shareapi.DriverName)
		}
		for _, s := range p.Shares {
			fmt.Fprintf(w, "  volume %s, %s: %s\n", printable(s.Volume), printable(orDash(s.Share)), printable(s.Verdict))
			for _, e := range s.Evidence {
				fmt.Fprintf(w, "    - %s\n", printable(e))
			}
			if s.LastVersion != "" {
				fmt.Fprintf(w, "    last version received: %s\n", printable(s.LastVersion))
			}
			if s.Fix != "" {
				fmt.Fprintf(w, "    fix: %s\n", printable(s.Fix))
			}
		}
	}
	printLackedAndReads(w, rep.CallerLacked, rep.Reads)
}

func printLackedAndReads(w *strings.Builder, lacked, reads []string) {
	if len(lacked) > 0 {
		fmt.Fprintf(w, "you may not: %s\n", printable(strings.Join(lacked, "; ")))
	}
	fmt.Fprintf(w, "read: %s\n", printable(strings.Join(reads, ", ")))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
