package admin

// `shared-resource-csi who-uses sharedsecret/NAME` (or sharedconfigmap/NAME, or a source:
// secret/NAME or configmap/NAME with -n, through every share naming it): the pods that mount it,
// with their namespace, service account and node, whether each may `use` the share now and the
// version each last received (docs/operating.md, "Who uses a share"). Its cost is bounded and
// printed: one LIST of pods (every namespace the caller may list, by pages), a LIST of the driver's
// events by each reason that shows a share's files or takes them away, the shares, and one
// SubjectAccessReview per distinct (namespace, service account, share), not per pod. Pods are
// matched on the client, by their csi volumes' attributes; nothing is written, no object is created
// per pod.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

type whoUsesRow struct {
	Namespace      string `json:"namespace"`
	Pod            string `json:"pod"`
	ServiceAccount string `json:"serviceAccount"`
	Node           string `json:"node,omitempty"`
	Phase          string `json:"phase"`
	Volume         string `json:"volume"`
	Share          string `json:"share"`
	MayUse         string `json:"mayUse"` // yes, no, unknown
	State          string `json:"state"`  // published, revoked, or pending
	LastVersion    string `json:"lastVersion"`
}

type whoUsesReport struct {
	Shares       []string     `json:"shares"`
	Pods         []whoUsesRow `json:"pods"`
	CallerLacked []string     `json:"callerLacked,omitempty"`
	Reads        []string     `json:"reads"`
}

// whoUsesShares resolves the target to the shares it means.
func whoUsesShares(ctx context.Context, a *adminClient, ns, target string) ([]shareapi.Ref, error) {
	kind, name, ok := strings.Cut(target, "/")
	if !ok || name == "" {
		return nil, fmt.Errorf("%q: name sharedsecret/NAME, sharedconfigmap/NAME, or a source secret/NAME or configmap/NAME (its namespace with -n)", target)
	}
	kind = strings.ToLower(kind)
	for _, row := range shareapi.AllKinds() {
		switch kind {
		case strings.ToLower(row.TypeName), row.Resource:
			if _, err := a.getShare(ctx, row.Kind, name); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
				return nil, err
			}
			return []shareapi.Ref{{Kind: row.Kind, Name: name}}, nil
		case row.Kind.ListName(), row.Source.Resource:
			if srcNS, srcName, ok := strings.Cut(name, "/"); ok {
				ns, name = srcNS, srcName
			}
			if ns == "" {
				return nil, fmt.Errorf("%s: give the source's namespace with -n", target)
			}
			items, err := a.listShares(ctx, row.Kind)
			if err != nil {
				return nil, fmt.Errorf("listing the %s that could name %s %s/%s: %w", row.Resource, row.Kind, ns, name, err)
			}
			var refs []shareapi.Ref
			for i := range items {
				sh, err := a.d.Share(row.Kind, &items[i])
				if err == nil && sh.Source.Namespace == ns && sh.Source.Name == name {
					refs = append(refs, shareapi.Ref{Kind: row.Kind, Name: sh.Name})
				}
			}
			return refs, nil
		}
	}
	return nil, fmt.Errorf("%q: the kind must be sharedsecret, sharedconfigmap, secret or configmap", kind)
}

// runWhoUses lists the pods that mount the target's shares.
func runWhoUses(ctx context.Context, a *adminClient, o *adminOptions, target string) (*whoUsesReport, error) {
	refs, err := whoUsesShares(ctx, a, o.namespace, target)
	if err != nil {
		return nil, err
	}
	rep := &whoUsesReport{}
	for _, r := range refs {
		rep.Shares = append(rep.Shares, r.String())
	}
	if len(refs) == 0 {
		rep.CallerLacked, rep.Reads = a.lacked, a.readsSummary()
		return rep, nil
	}
	// Only the pods that mount one of the shares are kept, page by page.
	var pods []corev1.Pod
	err = a.eachPod(ctx, "", "", "", func(p *corev1.Pod) {
		for _, v := range podShareVolumes(p) {
			vrefs, _ := a.d.ShareAttributes(v.CSI.VolumeAttributes)
			for _, ref := range vrefs {
				if slices.Contains(refs, ref) {
					pods = append(pods, *p)
					return
				}
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods in every namespace: %w", err)
	}
	// The driver's events on pods, by pod UID, oldest first; an error leaves them unknown.
	events := map[types.UID][]corev1.Event{}
	evErr := error(nil)
	for _, reason := range whoUsesEventReasons() {
		evs, err := a.listEvents(ctx, "", "reason="+reason)
		if err != nil {
			evErr = err
			continue
		}
		for _, e := range evs {
			// Only an event of the pod's own namespace speaks of it: one written in another
			// namespace naming the pod's UID is not the driver's.
			if e.Namespace == e.InvolvedObject.Namespace {
				events[e.InvolvedObject.UID] = append(events[e.InvolvedObject.UID], e)
			}
		}
	}
	type accessKey struct {
		ns, sa string
		ref    shareapi.Ref
	}
	reviewed := map[accessKey]string{}
	for i := range pods {
		p := &pods[i]
		for _, v := range podShareVolumes(p) {
			vrefs, err := a.d.ShareAttributes(v.CSI.VolumeAttributes)
			if err != nil {
				continue
			}
			for _, ref := range vrefs {
				if !slices.Contains(refs, ref) {
					continue
				}
				k := accessKey{p.Namespace, podServiceAccount(p), ref}
				may, seen := reviewed[k]
				if !seen {
					allowed, _, err := a.mayUse(ctx, k.ns, k.sa, ref)
					switch {
					case err != nil:
						may = "unknown"
					case allowed:
						may = "yes"
					default:
						may = "no"
					}
					reviewed[k] = may
				}
				evs := slices.DeleteFunc(slices.Clone(events[p.UID]), func(e corev1.Event) bool { return e.Namespace != p.Namespace })
				sortEvents(evs)
				rep.Pods = append(rep.Pods, whoUsesRow{Namespace: p.Namespace, Pod: p.Name, ServiceAccount: k.sa, Node: p.Spec.NodeName,
					Phase: string(p.Status.Phase), Volume: v.Name, Share: ref.String(), MayUse: may, State: volumeState(p, evs, ref, evErr),
					LastVersion: lastVersion(evs, ref, evErr)})
			}
		}
	}
	rep.CallerLacked, rep.Reads = a.lacked, a.readsSummary()
	return rep, nil
}

// whoUsesEventReasons is the reasons of the driver's events who-uses lists: the ones that show a
// share's files or take them away (shareapi.FilesAfter), and the version a pod last received.
func whoUsesEventReasons() []string {
	var out []string
	for _, r := range shareapi.ShareEventReasons() {
		if f, _ := shareapi.FilesAfter(r); f != shareapi.FilesAsBefore {
			out = append(out, r)
		}
	}
	return out
}

// volumeState is what pod p sees of share ref, from the driver's events on it (evs, oldest first;
// evErr: they could not be read): pending (not mounted yet), published, revoked or replaced (its
// files away: the reason of the event that took them), or unknown.
func volumeState(p *corev1.Pod, evs []corev1.Event, ref shareapi.Ref, evErr error) string {
	switch {
	case p.Status.Phase == corev1.PodPending && !podHasStarted(p):
		return "pending"
	case evErr != nil:
		return "unknown"
	}
	if away := filesAwayEvent(evs, ref); away != nil {
		if away.Reason == shareapi.ReasonShareReplaced {
			return "replaced"
		}
		return "revoked"
	}
	return "published"
}

// podHasStarted says whether any container of the pod has run (its volumes were mounted).
func podHasStarted(p *corev1.Pod) bool {
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// printWhoUses writes the report for people: a table, then what it read. Every cell passes
// through printable: pods' names, attributes and events are others' text, and must not make
// lines or columns of the report's own.
func printWhoUses(w *strings.Builder, rep *whoUsesReport) {
	if len(rep.Shares) == 0 {
		fmt.Fprintf(w, "no share names it\n")
	} else {
		fmt.Fprintf(w, "shares: %s\n", printable(strings.Join(rep.Shares, ", ")))
	}
	rows := [][]string{{"NAMESPACE", "POD", "SERVICE ACCOUNT", "NODE", "PHASE", "VOLUME", "SHARE", "MAY USE", "STATE", "LAST VERSION"}}
	for _, r := range rep.Pods {
		row := []string{r.Namespace, r.Pod, r.ServiceAccount, orDash(r.Node), r.Phase, r.Volume, r.Share, r.MayUse, r.State, r.LastVersion}
		for i := range row {
			row[i] = printable(row[i])
		}
		rows = append(rows, row)
	}
	if len(rep.Pods) == 0 {
		fmt.Fprintf(w, "no pod mounts it\n")
	} else {
		widths := make([]int, len(rows[0]))
		for _, row := range rows {
			for i, c := range row {
				widths[i] = max(widths[i], len(c))
			}
		}
		for _, row := range rows {
			for i, c := range row {
				if i == len(row)-1 {
					fmt.Fprintf(w, "%s\n", c)
				} else {
					fmt.Fprintf(w, "%-*s  ", widths[i], c)
				}
			}
		}
	}
	printLackedAndReads(w, rep.CallerLacked, rep.Reads)
}
