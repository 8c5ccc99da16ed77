package admin

// What the admin commands (diagnose.go, whouses.go) read, and how: with the caller's own
// kubeconfig, only reads (a SubjectAccessReview is a question, it changes nothing), through the
// driver's REST clients (internal/kubeclient). Every request is counted for the "reads" line the commands
// print, and every one the caller was refused (403) is noted as a permission the caller lacks,
// so the commands say what they could not see instead of guessing.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shared-resource/csi-driver/internal/kubeclient"
	"github.com/shared-resource/csi-driver/internal/shareapi"
)

// adminClient is one admin command's view of the cluster.
type adminClient struct {
	d      Driver
	k      *kubeclient.Clients
	reads  map[string]int // "LIST pods (all namespaces)" -> requests made
	lacked []string       // permissions the caller was refused, as `kubectl auth can-i` words
}

// newAdminClient loads the caller's kubeconfig as kubectl does ($KUBECONFIG, ~/.kube/config,
// or the file and context given) and returns the client and the context's namespace.
func newAdminClient(d Driver, kubeconfig, kubeContext string) (*adminClient, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	cfg.UserAgent = "shared-resource-csi-admin/" + d.Version
	cfg.QPS, cfg.Burst = 20, 40
	k, err := kubeclient.New(cfg)
	if err != nil {
		return nil, "", err
	}
	return &adminClient{d: d, k: k, reads: map[string]int{}}, ns, nil
}

// refused notes a 403 as a permission the caller lacks and says whether err was one.
func (a *adminClient) refused(err error, verb, resource, ns string) bool {
	if !apierrors.IsForbidden(err) {
		return false
	}
	p := verb + " " + resource
	if ns != "" {
		p += " -n " + ns
	}
	if !slices.Contains(a.lacked, p) {
		a.lacked = append(a.lacked, p)
	}
	return true
}

func (a *adminClient) count(what string) { a.reads[what]++ }

// readsSummary is what the command read, one "N× REQUEST" a part, sorted.
func (a *adminClient) readsSummary() []string {
	var out []string
	for what, n := range a.reads {
		out = append(out, fmt.Sprintf("%d× %s", n, what))
	}
	slices.Sort(out)
	return out
}

func nsWords(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

func (a *adminClient) getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	a.count("GET pod")
	p := &corev1.Pod{}
	err := a.k.Core.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Into(p)
	a.refused(err, "get", "pods", ns)
	return p, err
}

// listPods lists the pods of ns ("" for all) matching the selectors.
func (a *adminClient) listPods(ctx context.Context, ns, labelSelector, fieldSelector string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	err := a.eachPod(ctx, ns, labelSelector, fieldSelector, func(p *corev1.Pod) { out = append(out, *p) })
	return out, err
}

// eachPod hands each pod of ns ("" for all) matching the selectors to f, reading them by pages
// of 500, so that a caller keeping only some holds one page at a time.
func (a *adminClient) eachPod(ctx context.Context, ns, labelSelector, fieldSelector string, f func(*corev1.Pod)) error {
	opts := metav1.ListOptions{LabelSelector: labelSelector, FieldSelector: fieldSelector, Limit: 500}
	a.count("LIST pods (" + nsWords(ns) + ")")
	for {
		list := &corev1.PodList{}
		err := a.k.Core.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
		if err != nil {
			a.refused(err, "list", "pods", ns)
			return err
		}
		for i := range list.Items {
			f(&list.Items[i])
		}
		if list.Continue == "" {
			return nil
		}
		opts.Continue = list.Continue
	}
}

// printable is s with every character a terminal does not print as itself (control characters,
// a line break, an escape sequence's ESC, a format character that reorders text, invalid UTF-8)
// written as its Go escape (\n, \x1b, \u202e): names, attributes, conditions and event messages
// are written by others (a pod's author, a share's owner) and printed to an admin's terminal,
// where they must neither start a line of the report's own (a forged verdict or fix) nor
// recolour, move the cursor, retitle the terminal or write its clipboard.
func printable(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[0])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[:size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[size:]
	}
	return b.String()
}

// listEvents lists the events of ns ("" for all) matching fieldSelector, by pages of 500.
func (a *adminClient) listEvents(ctx context.Context, ns, fieldSelector string) ([]corev1.Event, error) {
	var out []corev1.Event
	opts := metav1.ListOptions{FieldSelector: fieldSelector, Limit: 500}
	a.count("LIST events (" + nsWords(ns) + ", " + fieldSelector + ")")
	for {
		list := &corev1.EventList{}
		err := a.k.Core.Get().Namespace(ns).Resource("events").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
		if err != nil {
			a.refused(err, "list", "events", ns)
			return nil, err
		}
		for _, e := range list.Items {
			// Only those that say they are the driver's: anyone who may create events in a
			// namespace could write one with the driver's reason. The component is the writer's
			// own word too, so an event is shown as evidence, never as proof.
			if e.Source.Component == shareapi.EventComponent || e.Reason == "FailedMount" {
				out = append(out, e)
			}
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

func (a *adminClient) getShare(ctx context.Context, k shareapi.Kind, name string) (*unstructured.Unstructured, error) {
	a.count("GET " + k.Resource())
	u, err := a.k.Dyn.Resource(shareapi.ShareGVR(k)).Get(ctx, name, metav1.GetOptions{})
	a.refused(err, "get", k.Resource()+"."+shareapi.Group, "")
	return u, err
}

func (a *adminClient) listShares(ctx context.Context, k shareapi.Kind) ([]unstructured.Unstructured, error) {
	a.count("LIST " + k.Resource())
	l, err := a.k.Dyn.Resource(shareapi.ShareGVR(k)).List(ctx, metav1.ListOptions{})
	if err != nil {
		a.refused(err, "list", k.Resource()+"."+shareapi.Group, "")
		return nil, err
	}
	return l.Items, nil
}

// sourceUID is the UID of a share's source, read as metadata only (never its data).
func (a *adminClient) sourceUID(ctx context.Context, key shareapi.SourceKey) (string, error) {
	a.count("GET " + shareapi.SourceGVR(key.Kind).Resource + " (metadata only)")
	m, err := a.k.Meta.Resource(shareapi.SourceGVR(key.Kind)).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		a.refused(err, "get", shareapi.SourceGVR(key.Kind).Resource, key.Namespace)
		return "", err
	}
	return string(m.GetUID()), nil
}

func (a *adminClient) getDeployment(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	a.count("GET deployment")
	u, err := a.k.Dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	a.refused(err, "get", "deployments.apps", ns)
	return u, err
}

// mayUse asks whether the service account may `use` the share now (the driver's own question,
// the root's authz.go). The caller must be allowed to create SubjectAccessReviews.
func (a *adminClient) mayUse(ctx context.Context, ns, sa string, ref shareapi.Ref) (allowed bool, reason string, err error) {
	return a.review(ctx, "system:serviceaccount:"+ns+":"+sa,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		authorizationv1.ResourceAttributes{Namespace: ns, Verb: "use", Group: shareapi.Group, Resource: ref.Kind.Resource(), Name: ref.Name})
}

// driverMayRead asks whether the driver's service account (NAMESPACE:NAME) may get the source.
func (a *adminClient) driverMayRead(ctx context.Context, account string, key shareapi.SourceKey) (allowed bool, reason string, err error) {
	ns, name, _ := strings.Cut(account, ":")
	return a.review(ctx, "system:serviceaccount:"+ns+":"+name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		authorizationv1.ResourceAttributes{Namespace: key.Namespace, Verb: "get", Resource: shareapi.SourceGVR(key.Kind).Resource, Name: key.Name})
}

func (a *adminClient) review(ctx context.Context, user string, groups []string, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
	a.count("CREATE subjectaccessreviews")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs}}
	res, err := kubeclient.SARClient{C: a.k.Authz}.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		a.refused(err, "create", "subjectaccessreviews.authorization.k8s.io", "")
		return false, "", err
	}
	return res.Status.Allowed && !res.Status.Denied, res.Status.Reason, nil
}

// driverPodOn is the driver's node plugin pod on node, or nil.
func (a *adminClient) driverPodOn(ctx context.Context, driverNS, node string) (*corev1.Pod, error) {
	pods, err := a.listPods(ctx, driverNS, driverPodSelector, "spec.nodeName="+node)
	if err != nil {
		return nil, err
	}
	// A pod being deleted, or whose containers have ended for good, is no longer the node's driver:
	// the DaemonSet's next one is (or none, which is the verdict's own evidence).
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return p, nil
		}
	}
	return nil, nil
}

// driverPodSelector selects the chart's node plugin pods (the DaemonSet's).
const driverPodSelector = "app.kubernetes.io/name=shared-resource-csi,app.kubernetes.io/component=node-plugin"

// podReady says whether the pod's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podShareVolumes is the pod's csi volumes of this driver: volume name -> its attributes.
func podShareVolumes(p *corev1.Pod) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range p.Spec.Volumes {
		if v.CSI != nil && v.CSI.Driver == shareapi.DriverName {
			out = append(out, v)
		}
	}
	return out
}

// podServiceAccount is the pod's service account ("default" when unset).
func podServiceAccount(p *corev1.Pod) string {
	if p.Spec.ServiceAccountName != "" {
		return p.Spec.ServiceAccountName
	}
	return "default"
}
