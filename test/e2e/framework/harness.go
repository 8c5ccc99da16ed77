package framework

// The end-to-end harness: the real driver binary, started as a subprocess, called over its CSI
// socket by the test playing the kubelet, against the real kube-apiserver that
// `hack/cluster.sh up` started (its kubeconfig in $KUBECONFIG). It and every test that needs it
// build only with the tag integration (make test); such a test fails, never skips, when the
// cluster or root is missing.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeEnv is the API server the e2e tests use.
type KubeEnv struct {
	Kubeconfig string // the cluster admin's
	// DriverKubeconfig authenticates as deploy.yaml's ServiceAccount with a token, so every
	// driver the tests start has exactly deploy.yaml's RBAC: no read of any Secret or ConfigMap
	// but where a test grants it, as an admin would (sourceNamespace).
	DriverKubeconfig string
	// statusKubeconfig authenticates as deploy.yaml's status controller ServiceAccount (the
	// only one that may write share status), made on first use (statusKubeconfigFor).
	statusOnce          sync.Once
	statusKubeconfig    string
	statusKubeconfigErr error
	Kube                kubernetes.Interface
	Dyn                 dynamic.Interface
	Binary              string // the production build

	crashOnce   sync.Once
	crashBin    string // built with the tag crashpoints (internal/crashpoint), for the crash tests
	crashBinErr error
}

// CrashBinary returns the driver built with its crash points ($CRASH_DRIVER_BINARY, as
// hack/test.sh builds it, or built here once), or fails the test.
func (e *KubeEnv) CrashBinary(t testing.TB) string {
	t.Helper()
	e.crashOnce.Do(func() {
		if e.crashBin = os.Getenv("CRASH_DRIVER_BINARY"); e.crashBin != "" {
			return
		}
		dir, err := os.MkdirTemp("", "srcsi-bin")
		if err != nil {
			e.crashBinErr = err
			return
		}
		e.crashBin = filepath.Join(dir, "shared-resource-csi-crashpoints")
		if out, err := exec.Command("go", "build", "-tags", "crashpoints", "-o", e.crashBin, ".").CombinedOutput(); err != nil {
			e.crashBinErr = fmt.Errorf("building the driver with crash points: %v\n%s", err, out)
		}
	})
	if e.crashBinErr != nil {
		t.Fatal(e.crashBinErr)
	}
	return e.crashBin
}

// The driver's namespace and ServiceAccount in deploy.yaml.
const (
	DriverNamespace      = "csi-sharedresource"
	DriverServiceAccount = "shared-resource-csi-driver"
	DriverUser           = "system:serviceaccount:" + DriverNamespace + ":" + DriverServiceAccount
	// The status controller's ServiceAccount in deploy.yaml (--role=status).
	StatusServiceAccount = "shared-resource-csi-status"
	StatusUser           = "system:serviceaccount:" + DriverNamespace + ":" + StatusServiceAccount
	// driverAccountFlag is how --service-account names both accounts that read sources
	// (kubectl's --serviceaccount form), as the chart gives it.
	driverAccountFlag = DriverNamespace + ":" + DriverServiceAccount + "," + DriverNamespace + ":" + StatusServiceAccount
)

var (
	envOnce sync.Once
	envVal  *KubeEnv
	envErr  error
)

// E2e returns the cluster and the driver binary, or fails the test (or benchmark): these must
// not pass by skipping.
func E2e(t testing.TB) *KubeEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this needs root (it mounts file systems); run it with `make test` or `make bench`")
	}
	envOnce.Do(func() { envVal, envErr = setupKubeEnv() })
	if envErr != nil {
		t.Fatalf("end-to-end environment unavailable (`make test` and `make bench` start the cluster): %v", envErr)
	}
	return envVal
}

func setupKubeEnv() (*KubeEnv, error) {
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		return nil, fmt.Errorf("$KUBECONFIG is not set")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := installDeployObjects(kc); err != nil {
		return nil, err
	}
	driverKC, err := writeServiceAccountKubeconfig(kube, cfg, DriverServiceAccount)
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("DRIVER_BINARY")
	if bin == "" {
		dir, err := os.MkdirTemp("", "srcsi-bin")
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(dir, "shared-resource-csi")
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("building the driver: %v\n%s", err, out)
		}
	}
	return &KubeEnv{Kubeconfig: kc, DriverKubeconfig: driverKC, Kube: kube, Dyn: dyn, Binary: bin}, nil
}

// KubectlBinary is the kubectl the tests run ($KUBECTL, as hack/test.sh sets it).
func KubectlBinary() string {
	if k := os.Getenv("KUBECTL"); k != "" {
		return k
	}
	return "kubectl"
}

// installDeployObjects applies deploy.yaml as users do, but for its DaemonSet and Deployment (the
// node plugin and the status controller run as subprocesses here; the pod suite deploys them
// itself), and waits until the CRDs are served: the same CRDs, RBAC and admission policy the
// product installs.
func installDeployObjects(kubeconfig string) error {
	docs, err := os.ReadFile("deploy.yaml")
	if err != nil {
		return err
	}
	var objs []string
	for _, doc := range strings.Split(string(docs), "\n---") {
		if !strings.Contains(doc, "\nkind: DaemonSet\n") && !strings.Contains(doc, "\nkind: Deployment\n") {
			objs = append(objs, doc)
		}
	}
	cmd := exec.Command(KubectlBinary(), "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-")
	cmd.Stdin = strings.NewReader(strings.Join(objs, "\n---\n"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying deploy.yaml: %v\n%s", err, out)
	}
	cmd = exec.Command(KubectlBinary(), "--kubeconfig", kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/sharedsecrets.sharedresource.openshift.io", "crd/sharedconfigmaps.sharedresource.openshift.io")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("waiting for CRDs: %v\n%s", err, out)
	}
	return nil
}

// StatusKubeconfigFor returns a kubeconfig that authenticates as the status controller's
// ServiceAccount, or fails the test.
func (e *KubeEnv) StatusKubeconfigFor(t testing.TB) string {
	t.Helper()
	e.statusOnce.Do(func() {
		cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
		if err != nil {
			e.statusKubeconfigErr = err
			return
		}
		e.statusKubeconfig, e.statusKubeconfigErr = writeServiceAccountKubeconfig(e.Kube, cfg, StatusServiceAccount)
	})
	if e.statusKubeconfigErr != nil {
		t.Fatal(e.statusKubeconfigErr)
	}
	return e.statusKubeconfig
}

// writeServiceAccountKubeconfig writes a kubeconfig that authenticates as one of deploy.yaml's
// ServiceAccounts (in the driver's namespace) with a token from the TokenRequest API (as the
// pods do), valid for longer than any test run.
func writeServiceAccountKubeconfig(kube kubernetes.Interface, admin *rest.Config, sa string) (string, error) {
	expiry := int64(6 * 3600)
	tr, err := kube.CoreV1().ServiceAccounts(DriverNamespace).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %s/%s: %v", DriverNamespace, sa, err)
	}
	dir, err := os.MkdirTemp("", "srcsi-driver-kubeconfig")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, writeTokenKubeconfig(path, admin, tr.Status.Token)
}

// writeTokenKubeconfig writes a kubeconfig for the admin's cluster that authenticates with token.
func writeTokenKubeconfig(path string, admin *rest.Config, token string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: admin.Host, InsecureSkipTLSVerify: admin.Insecure,
		CertificateAuthority: admin.CAFile, CertificateAuthorityData: admin.CAData, TLSServerName: admin.ServerName}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	return clientcmd.WriteToFile(*kc, path)
}

// RandSuffix returns a short random lowercase hex string for unique names and secret markers.
func RandSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Namespace creates a namespace for the test and deletes it afterwards.
func (e *KubeEnv) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	name := prefix + "-" + RandSuffix()
	_, err := e.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = e.Kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// SourceNamespace creates a namespace for a test's sources and lets the driver read them, as an
// admin does (deploy.yaml's header): a RoleBinding to the source-reader ClusterRole for each of
// its accounts, the node plugin's and the status controller's.
func (e *KubeEnv) SourceNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := e.Namespace(t, prefix)
	e.GrantSourceRead(t, ns, SourceReaders()...)
	return ns
}

// GrantSourceRead binds deploy.yaml's source-reader ClusterRole to a driver's service accounts in
// ns (one RoleBinding naming them all, as the command the driver prints does) and waits until the
// authorizer applies it; it returns a function that takes it away again.
func (e *KubeEnv) GrantSourceRead(t testing.TB, ns string, driver ...rbacv1.Subject) (revoke func()) {
	t.Helper()
	ctx := context.Background()
	name := SourceReaderRole + "-" + RandSuffix()
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: SourceReaderRole},
		Subjects:   driver,
	}
	if _, err := e.Kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("letting the driver read namespace %s: %v", ns, err)
	}
	for _, sa := range driver {
		e.WaitMayGet(t, sa, ns, "secrets", "", true)
	}
	return func() {
		if err := e.Kube.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, sa := range driver {
			e.WaitMayGet(t, sa, ns, "secrets", "", false)
		}
	}
}

// SourceReaders are the driver's accounts that read sources: the node plugins' and the status
// controller's.
func SourceReaders() []rbacv1.Subject {
	return []rbacv1.Subject{ServiceAccount(DriverNamespace, DriverServiceAccount), ServiceAccount(DriverNamespace, StatusServiceAccount)}
}

// WaitMayGet waits until the authorizer says whether the service account sa may get resource
// (name: any, when empty) in ns: RBAC changes reach it a moment after they are written.
func (e *KubeEnv) WaitMayGet(t testing.TB, sa rbacv1.Subject, ns, resource, name string, want bool) {
	t.Helper()
	user := "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
	Eventually(t, 30*time.Second, func() error {
		res, err := e.Kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: resource, Name: name}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if res.Status.Allowed != want {
			return fmt.Errorf("%s may get %s %q in %s: %v, waiting for %v", user, resource, name, ns, res.Status.Allowed, want)
		}
		return nil
	})
}

// CreateSecret creates the Secret ns/name holding data.
func (e *KubeEnv) CreateSecret(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	_, err := e.Kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating secret: %v", err)
	}
}

// UpdateSecret replaces the data of the Secret ns/name.
func (e *KubeEnv) UpdateSecret(t *testing.T, ns, name string, data map[string][]byte) {
	t.Helper()
	s, err := e.Kube.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = data
	if _, err := e.Kube.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// CreateShare creates a cluster-scoped SharedSecret or SharedConfigMap and deletes it afterwards.
func (e *KubeEnv) CreateShare(t *testing.T, kind ShareKind, name, srcNS, srcName string) {
	t.Helper()
	ref := "secretRef"
	if kind == KindConfigMap {
		ref = "configMapRef"
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ShareGroup + "/v1alpha1",
		"kind":       kind.ShareTypeName(),
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{ref: map[string]any{"namespace": srcNS, "name": srcName}},
	}}
	if _, err := e.Dyn.Resource(ShareGVR(kind)).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s: %v", kind.ShareTypeName(), err)
	}
	t.Cleanup(func() { e.DeleteShare(t, kind, name) })
}

// DeleteShare deletes the share of kind named name.
func (e *KubeEnv) DeleteShare(t *testing.T, kind ShareKind, name string) {
	err := e.Dyn.Resource(ShareGVR(kind)).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting share: %v", err)
	}
}

// Grant lets subject `use` the share through a Role and RoleBinding in ns; it returns a function
// that revokes the grant by deleting the RoleBinding.
func (e *KubeEnv) Grant(t *testing.T, ns string, kind ShareKind, share string, subject rbacv1.Subject) (revoke func()) {
	t.Helper()
	ctx := context.Background()
	name := "use-" + share + "-" + RandSuffix()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{ShareGroup}, Resources: []string{kind.ShareResource()},
			ResourceNames: []string{share}, Verbs: []string{"use"}}},
	}
	if _, err := e.Kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := e.Kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's authorizer sees RBAC changes through its own cache, a moment later: wait
	// until the grant is in effect, so tests measure the driver, not that lag.
	e.WaitAccess(t, ns, kind, share, subject, true)
	return func() {
		if err := e.Kube.RbacV1().RoleBindings(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e.WaitAccess(t, ns, kind, share, subject, false)
	}
}

// WaitAccess waits until a SubjectAccessReview for subject says `want` (a ServiceAccount
// subject as itself; a Group subject through a service account in that group).
func (e *KubeEnv) WaitAccess(t *testing.T, ns string, kind ShareKind, share string, subject rbacv1.Subject, want bool) {
	t.Helper()
	user, groups := subjectIdentity(subject, ns)
	e.waitReview(t, user, groups, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "use", Group: ShareGroup, Resource: kind.ShareResource(), Name: share}, want)
}

// WaitAuthorized waits until the API server's authorizer lets subject do attrs. RBAC objects
// reach the authorizer through its informers, a moment after they are created: a request made
// before then is refused ("clusterrole ... not found"), so a test that has just granted a
// permission waits for it before using it.
func (e *KubeEnv) WaitAuthorized(t *testing.T, subject rbacv1.Subject, attrs authorizationv1.ResourceAttributes) {
	t.Helper()
	user, groups := subjectIdentity(subject, attrs.Namespace)
	e.waitReview(t, user, groups, attrs, true)
}

// subjectIdentity is the user and groups of a request made as subject (for a Group subject, a
// service account of ns in that group).
func subjectIdentity(subject rbacv1.Subject, ns string) (user string, groups []string) {
	switch subject.Kind {
	case "Group":
		return "system:serviceaccount:" + ns + ":any-sa", []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated", subject.Name}
	case "User":
		return subject.Name, []string{"system:authenticated"}
	}
	return "system:serviceaccount:" + subject.Namespace + ":" + subject.Name, []string{"system:serviceaccounts", "system:serviceaccounts:" + subject.Namespace, "system:authenticated"}
}

// waitReview waits until a SubjectAccessReview of user (in groups) for attrs says want.
func (e *KubeEnv) waitReview(t *testing.T, user string, groups []string, attrs authorizationv1.ResourceAttributes, want bool) {
	t.Helper()
	Eventually(t, 30*time.Second, func() error {
		res, err := e.Kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if res.Status.Allowed != want {
			return fmt.Errorf("%s may %s %s %q: %v, waiting for %v", user, attrs.Verb, attrs.Resource, attrs.Name, res.Status.Allowed, want)
		}
		return nil
	})
}

// ServiceAccount is an RBAC subject for the ServiceAccount ns/name.
func ServiceAccount(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "ServiceAccount", Namespace: ns, Name: name}
}

// PodEvents lists the events recorded on a pod with the given reason.
func (e *KubeEnv) PodEvents(ns, pod, reason string) ([]corev1.Event, error) {
	list, err := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason,
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// DriverProc is one run of the driver binary; restart() starts it again on the same dirs.
type DriverProc struct {
	t           testing.TB
	kube        *KubeEnv
	Binary      string // the driver binary: e.kube.binary, or its crash-point build
	Root        string // temp dir holding the kubelet root
	KubeletRoot string
	socket      string
	Args        []string
	env         []string // extra environment, e.g. a crash point; cleared by disarm()
	ownMountNS  bool     // run the driver in its own mount namespace (see withOwnMountNamespace)
	LogPath     string
	Cmd         *exec.Cmd
	conn        *grpc.ClientConn
	Node        csi.NodeClient
	identity    csi.IdentityClient
	// Secrets that must never appear in the driver's log
	Secrets [][]byte
	// deployed: started with a deployment's settings, not the tests' short intervals (asDeployed)
	deployed bool
	// Calls answered Aborted and retried (retryAborted), and the wait between tries.
	Aborted        atomic.Int64
	AbortedBackoff time.Duration
}

type driverOption func(*DriverProc)

// WithRelist sets the relist interval (default 2s, short so revocation tests are quick).
func WithRelist(d time.Duration) driverOption {
	return func(p *DriverProc) { p.Args = append(p.Args, "--relist-interval="+d.String()) }
}

// WithCrashAt runs the test build of the driver (crash points compiled in), armed to kill
// itself at step.
func WithCrashAt(step CrashStep) driverOption {
	return func(p *DriverProc) {
		p.Binary = p.kube.CrashBinary(p.t)
		p.env = append(p.env, CrashEnv+"="+string(step))
	}
}

// WithOwnMountNamespace runs the driver as a container with Bidirectional propagation runs it:
// in a mount namespace of its own, its mounts reaching the test's namespace by propagation.
func WithOwnMountNamespace() driverOption {
	return func(p *DriverProc) { p.ownMountNS = true }
}

// WithArgs adds flags; a flag given twice takes its last value.
func WithArgs(args ...string) driverOption {
	return func(p *DriverProc) { p.Args = append(p.Args, args...) }
}

// WithEnv adds environment variables (NAME=value) to the driver's, e.g. GOGC for a test that
// reads its heap.
func WithEnv(kv ...string) driverOption {
	return func(p *DriverProc) { p.env = append(p.env, kv...) }
}

// asStatusController runs the process as the status controller (--role=status) under the status
// controller's ServiceAccount, with its Lease in the driver's namespace. It serves no CSI socket:
// start it with startStatusController.
func asStatusController() driverOption {
	return func(p *DriverProc) {
		p.Args = append(p.Args, "--role=status", "--kubeconfig="+p.kube.StatusKubeconfigFor(p.t),
			"--status-lease-namespace="+DriverNamespace)
	}
}

// StartStatusController starts a status controller (asStatusController) and waits until its
// share caches synced; it stops it, checking its log for secrets, when t ends.
func (e *KubeEnv) StartStatusController(t testing.TB, opts ...driverOption) *DriverProc {
	t.Helper()
	p := e.PrepareDriver(t, append([]driverOption{asStatusController()}, opts...)...)
	p.Launch()
	Eventually(t, 30*time.Second, func() error {
		if b, _ := os.ReadFile(p.LogPath); !bytes.Contains(b, []byte(`"Share caches synced"`)) {
			return fmt.Errorf("the status controller has not synced its share caches yet")
		}
		return nil
	})
	return p
}

// AsDeployed starts the driver with the flags' defaults (deploy.yaml's settings, which the
// benchmarks measure) instead of the tests' short cache TTLs, relist interval and verbosity.
func AsDeployed() driverOption {
	return func(p *DriverProc) { p.deployed = true }
}

// StartDriver starts the driver binary in a fresh temp kubelet root and stops it, checking its
// log for secrets, when t ends.
func (e *KubeEnv) StartDriver(t testing.TB, opts ...driverOption) *DriverProc {
	t.Helper()
	p := e.PrepareDriver(t, opts...)
	p.Start()
	return p
}

// PrepareDriver sets up a driver's temp kubelet root and flags without starting it (start, or
// launch and waitReady), and stops it, checking its log for secrets, when t ends.
func (e *KubeEnv) PrepareDriver(t testing.TB, opts ...driverOption) *DriverProc {
	t.Helper()
	// Short base path: unix socket paths are limited to 108 bytes.
	root, err := os.MkdirTemp("", "srcsi")
	if err != nil {
		t.Fatal(err)
	}
	p := &DriverProc{t: t, kube: e, Binary: e.Binary, Root: root, KubeletRoot: filepath.Join(root, "kubelet"), AbortedBackoff: 50 * time.Millisecond}
	p.socket = filepath.Join(p.KubeletRoot, "plugins", DriverName, "csi.sock")
	p.LogPath = filepath.Join(root, "driver.log")
	for _, o := range opts {
		o(p)
	}
	args := []string{
		"--kubeconfig=" + e.DriverKubeconfig,
		"--service-account=" + driverAccountFlag,
		"--endpoint=unix://" + p.socket,
		"--kubelet-root-dir=" + p.KubeletRoot,
		"--state-dir=" + filepath.Join(p.KubeletRoot, "plugins", DriverName),
		"--registration-dir=",
		"--health-address=",
		"--node-id=test-node",
	}
	if !p.deployed {
		args = append(args,
			"--cache-ttl=1s",
			"--authz-cache-ttl=1s",
			"--relist-interval=2s",
			// Highest verbosity, for every file too: the log must still hold no secret
			// (checked at cleanup).
			"--v=10", "--vmodule=*=10",
		)
	}
	p.Args = append(args, p.Args...)
	if err := os.MkdirAll(filepath.Join(p.KubeletRoot, "pods"), 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Cleanup)
	if p.ownMountNS {
		// The kubelet's root is a shared mount (the kubelet makes it so): make the temp root one.
		if err := syscall.Mount(root, root, "", syscall.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("", root, "", syscall.MS_SHARED, ""); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Start starts the driver and waits until it answers Probe ready.
func (p *DriverProc) Start() {
	p.t.Helper()
	p.Launch()
	p.WaitReady()
}

// Launch starts the driver process and dials its socket, without waiting for it: many drivers
// can be launched within moments, as a fleet restarting together would be.
func (p *DriverProc) Launch() {
	t := p.t
	t.Helper()
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if p.ownMountNS {
		// As in a container with Bidirectional mount propagation: the driver in its own mount
		// namespace, whose copy of the (shared) temp root is a peer of the test's.
		p.Cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "unchanged", p.Binary}, p.Args...)...)
	} else {
		p.Cmd = exec.Command(p.Binary, p.Args...)
	}
	p.Cmd.Env = append(os.Environ(), p.env...)
	p.Cmd.Stdout, p.Cmd.Stderr = logf, logf
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	p.conn, err = grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.Node, p.identity = csi.NewNodeClient(p.conn), csi.NewIdentityClient(p.conn)
}

// Endpoint is the driver's CSI socket as a gRPC target (unix://...), for a client of its own
// (csi-sanity).
func (p *DriverProc) Endpoint() string { return "unix://" + p.socket }

// WaitReady waits until the launched driver answers Probe ready.
func (p *DriverProc) WaitReady() {
	p.t.Helper()
	Eventually(p.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := p.identity.Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			return err
		}
		if !r.GetReady().GetValue() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
}

// Kill stops the driver with SIGKILL, as a crash or OOM kill would.
func (p *DriverProc) Kill() {
	p.conn.Close()
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	_ = p.Cmd.Wait() // the kill's "signal: killed"
}

// WaitKilled waits for the driver to die by SIGKILL on its own (a crash point) and fails the
// test if it exits any other way or not at all.
func (p *DriverProc) WaitKilled() {
	p.t.Helper()
	done := make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(done) }() // how it died is read from ProcessState below
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.t.Fatal("the driver did not die at its crash point")
	}
	p.conn.Close()
	ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		p.t.Fatalf("the driver exited with %v, want killed by SIGKILL at its crash point", p.Cmd.ProcessState)
	}
}

// Disarm goes back to the production binary, without extra environment, for the next start.
func (p *DriverProc) Disarm() { p.Binary, p.env = p.kube.Binary, nil }

// Cleanup stops the driver, checks its log for secrets, and unmounts whatever a failed test
// left under its temp root (deepest first), so tests never leak mounts into each other.
func (p *DriverProc) Cleanup() {
	if p.Cmd != nil && p.Cmd.ProcessState == nil {
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Cmd.Process.Kill()
			<-done
		}
	}
	if p.conn != nil {
		p.conn.Close()
	}
	log, _ := os.ReadFile(p.LogPath)
	for _, s := range p.Secrets {
		if bytes.Contains(log, s) {
			p.t.Errorf("the driver's log contains a secret value %q", s)
		}
	}
	if p.t.Failed() {
		p.t.Logf("driver log (last 60 lines):\n%s", Tail(log, 60))
	}
	for _, m := range MountsUnder(p.Root) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH) // best effort: the test has ended
	}
	if p.ownMountNS {
		_ = syscall.Unmount(p.Root, syscall.MNT_DETACH)
	}
	os.RemoveAll(p.Root)
}

// Tail is the last n lines of b.
func Tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// MountsUnder lists mount points under dir, deepest first.
func MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	entries, err := parseMountInfo(bufio.NewReader(f))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.MountPoint, dir+"/") {
			out = append(out, e.MountPoint)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Secret registers a value that must never appear in the driver's log and returns it.
func (p *DriverProc) Secret(prefix string) []byte {
	v := []byte(prefix + "-s3cr3t-" + RandSuffix())
	// The raw bytes, and the base64 form the API carries them in.
	p.Secrets = append(p.Secrets, v, []byte(base64.StdEncoding.EncodeToString(v)))
	return v
}

// TestVolume is one in-line volume of one pod, as the kubelet would ask for it.
type TestVolume struct {
	ID, PodUID, PodName, PodNS, sa, Target string
	Attrs                                  map[string]string
	FsGroup                                string   // the kubelet's volume_mount_group
	MountFlags                             []string // e.g. an SELinux context=
}

// Volume makes a pod dir like the kubelet does and returns the volume's request parameters.
func (p *DriverProc) Volume(podNS, sa string, attrs map[string]string) *TestVolume {
	p.t.Helper()
	uid := fmt.Sprintf("%08x-0000-4000-8000-%012x", randUint32(), randUint32())
	v := &TestVolume{
		ID:     "csi-" + RandSuffix() + RandSuffix(),
		PodUID: uid, PodName: "pod-" + RandSuffix(), PodNS: podNS, sa: sa, Attrs: attrs,
	}
	v.Target = filepath.Join(p.KubeletRoot, "pods", uid, "volumes", "kubernetes.io~csi", "vol", "mount")
	if err := os.MkdirAll(filepath.Dir(v.Target), 0o750); err != nil {
		p.t.Fatal(err)
	}
	return v
}

func randUint32() uint32 {
	b := make([]byte, 4)
	rand.Read(b)
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// PublishRequest is the NodePublishVolume request the kubelet sends for v.
func (v *TestVolume) PublishRequest() *csi.NodePublishVolumeRequest {
	vc := map[string]string{
		CtxPodName: v.PodName, CtxPodNamespace: v.PodNS, CtxPodUID: v.PodUID,
		CtxServiceAccount: v.sa, CtxEphemeral: "true",
	}
	for k, val := range v.Attrs {
		vc[k] = val
	}
	return &csi.NodePublishVolumeRequest{
		VolumeId:   v.ID,
		TargetPath: v.Target,
		Readonly:   true,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
				VolumeMountGroup: v.FsGroup, MountFlags: v.MountFlags,
			}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY},
		},
		VolumeContext: vc,
	}
}

// PublishOnce is one NodePublishVolume call.
func (p *DriverProc) PublishOnce(v *TestVolume) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.Node.NodePublishVolume(ctx, v.PublishRequest())
	return err
}

// Publish calls NodePublishVolume as the kubelet does: an Aborted answer (another operation on
// the volume, e.g. the relist, holds its lock) is retried.
func (p *DriverProc) Publish(v *TestVolume) error {
	return p.RetryAborted(func() error { return p.PublishOnce(v) })
}

// Unpublish calls NodeUnpublishVolume for v, retrying Aborted as the kubelet does.
func (p *DriverProc) Unpublish(v *TestVolume) error {
	return p.RetryAborted(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := p.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.ID, TargetPath: v.Target})
		return err
	})
}

// RetryAborted retries, for up to 10 s, a call answered Aborted (the volume's lock was held,
// e.g. by the relist reconciling it), as the kubelet does; p.aborted counts the retries. The
// kubelet backs off for 500 ms and more; the benchmarks wait less, so that their figures are
// about the driver, not about a backoff policy.
func (p *DriverProc) RetryAborted(call func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := call()
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			return err
		}
		p.Aborted.Add(1)
		time.Sleep(p.AbortedBackoff)
	}
}

// SameFiles says how got differs from want, file by file (nil when they hold the same files and
// bytes): what a volume holds, read on the node (ReadVolume) or in the pod (podFiles), against
// what it should.
func SameFiles[V ~string | ~[]byte](got, want map[string]V) error {
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, k+" missing")
		case string(g) != string(w):
			diffs = append(diffs, fmt.Sprintf("%s has %d bytes (sha256 %.12s), want %d bytes (sha256 %.12s)", k, len(g), shortSum([]byte(g)), len(w), shortSum([]byte(w))))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+" unexpected")
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	return errors.New(strings.Join(diffs, "; "))
}

// ReadVolume reads the files a volume shows at target (a target path, or a volume's data dir):
// path -> content, subdirectories included, the atomic writer's ".." entries excluded.
func ReadVolume(t *testing.T, target string) map[string]string {
	t.Helper()
	// A name listed can be gone when it is read: the driver swapped the view in between (a
	// revocation takes the names away, a refresh those of the keys the source dropped). That is
	// the atomic writer working; the snapshot is taken again, so that it is always one view,
	// before or after. The writer removes a dropped key's name just after the swap, so until it
	// does (for as long as it is off the CPU, on a busy machine) the name dangles: the reads are
	// retried for up to a second, a name that stays dangling fails.
	const settle = time.Second
	deadline := time.Now().Add(settle)
	for attempt := 1; ; attempt++ {
		out, vanished, err := readVolumeOnce(target)
		switch {
		case err != nil:
			t.Fatal(err)
		case vanished && time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond)
			continue
		case vanished:
			t.Fatalf("reading volume %s: files vanished while it was read, %d times in a row over %v", target, attempt, settle)
		}
		return out
	}
}

func readVolumeOnce(target string) (files map[string]string, vanished bool, err error) {
	entries, err := os.ReadDir(target)
	if err != nil {
		return nil, false, fmt.Errorf("reading volume: %v", err)
	}
	files = map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		// Each name is a link into ..data: a file, or a directory of an item's path.
		err := filepath.WalkDir(filepath.Join(target, e.Name())+"/", func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if de.IsDir() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(target, p)
			files[rel] = string(b)
			return nil
		})
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(err, syscall.ENOTDIR) {
			// A file: WalkDir of "name/" fails on it.
			var b []byte
			if b, err = os.ReadFile(filepath.Join(target, e.Name())); err == nil {
				files[e.Name()] = string(b)
			}
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading %s: %v", e.Name(), err)
		}
	}
	return files, false, nil
}

// Eventually polls f until it returns nil or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// UnpublishAll unpublishes each volume, as the kubelet does when pods go, and checks that nothing
// of the driver's is left.
func (p *DriverProc) UnpublishAll(t *testing.T, vols ...*TestVolume) {
	t.Helper()
	for _, v := range vols {
		if err := p.Unpublish(v); err != nil {
			t.Fatalf("unpublish %s: %v", v.ID, err)
		}
	}
	p.AssertNothingLeft(t, vols...)
}

// AssertNothingLeft checks that no mount, volume dir or target of the driver's remains.
func (p *DriverProc) AssertNothingLeft(t *testing.T, vols ...*TestVolume) {
	t.Helper()
	if m := MountsUnder(p.KubeletRoot); len(m) > 0 {
		t.Errorf("mounts left behind: %q", m)
	}
	entries, _ := os.ReadDir(filepath.Join(p.KubeletRoot, "plugins", DriverName, "volumes"))
	if len(entries) > 0 {
		t.Errorf("volume dirs left behind: %d", len(entries))
	}
	for _, v := range vols {
		if _, err := os.Lstat(v.Target); err == nil {
			t.Errorf("target %s left behind", v.Target)
		}
	}
}

// RssOf reads a process's anonymous and file-backed resident memory from /proc, in bytes.
func RssOf(t testing.TB, pid int) (anon, file float64) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "RssAnon:":
			anon = kb * 1024
		case "RssFile:":
			file = kb * 1024
		}
	}
	return anon, file
}
