package main

// Fuzz targets for everything that turns untrusted input into file system paths, names or mount
// options: volume attributes and ids, and target paths. (Secret/ConfigMap keys, item paths and
// the writer that turns them into files are fuzzed in internal/atomicwriter.) Each target states
// invariants that must hold for every input, checked with oracles that share no code with the
// function under test (the API server's own validation from k8s.io/apimachinery, plain string
// arithmetic on segments), so a bug in a validator cannot hide itself.
//
// `go test` runs the seeds as ordinary tests; hack/fuzz.sh fuzzes each target for a bounded time.

import (
	"errors"
	"maps"
	"math"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
)

const fuzzKubeletRoot = "/var/lib/kubelet"

// fuzzEncodeAttrs and fuzzDecodeAttrs turn a volume context into one string and back, so the
// fuzzer can add, drop, rename and duplicate attributes (a later line wins, as the last of two
// duplicate map entries on the protobuf wire does).
func fuzzEncodeAttrs(m map[string]string) string {
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		lines = append(lines, k+"="+m[k])
	}
	return strings.Join(lines, "\n")
}

func fuzzDecodeAttrs(s string) map[string]string {
	m := map[string]string{}
	if s == "" {
		return m
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m
}

// fuzzCapability picks one of the capability shapes a CO could send; arg fills the one free
// field of the shape (fs type, mount flags one per line, volume mount group).
func fuzzCapability(kind uint8, arg string) *csi.VolumeCapability {
	mount := func(m *csi.VolumeCapability_MountVolume) *csi.VolumeCapability {
		return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: m}}
	}
	switch kind % 7 {
	case 0:
		return mount(&csi.VolumeCapability_MountVolume{})
	case 1:
		return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	case 2:
		return nil
	case 3:
		return mount(&csi.VolumeCapability_MountVolume{FsType: arg})
	case 4:
		return mount(&csi.VolumeCapability_MountVolume{MountFlags: strings.Split(arg, "\n")})
	case 5:
		return mount(&csi.VolumeCapability_MountVolume{VolumeMountGroup: arg})
	default:
		return &csi.VolumeCapability{} // no access type at all
	}
}

// fuzzIsUID is the pod UID shape, written out without the validator's regexp.
func fuzzIsUID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'a' || c > 'f') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// fuzzIsSegment: s names exactly one directory entry (no separator, not "." or "..", no NUL,
// which no system call takes).
func fuzzIsSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// fuzzIsControl: the ASCII control characters, which no path the kubelet builds contains and
// which would garble the driver's messages and logs.
func fuzzIsControl(r rune) bool { return r < 0x20 || r == 0x7f }

// fuzzSplitMountOptions splits mount data as the kernel does: at commas outside double quotes.
func fuzzSplitMountOptions(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// fuzzCheckCSITarget checks that target is exactly
// <root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount with every part a single segment, and
// that it cannot lexically leave root.
func fuzzCheckCSITarget(t *testing.T, root, target, wantUID string) {
	t.Helper()
	if !filepath.IsAbs(target) || filepath.Clean(target) != target {
		t.Fatalf("accepted target %q is not absolute and clean", target)
	}
	prefix := strings.TrimSuffix(root, "/") + "/"
	rel, ok := strings.CutPrefix(target, prefix)
	if !ok {
		t.Fatalf("accepted target %q is not under the kubelet root %q", target, root)
	}
	segs := strings.Split(rel, "/")
	if len(segs) != 6 || segs[0] != "pods" || segs[2] != "volumes" || segs[3] != "kubernetes.io~csi" || segs[5] != "mount" {
		t.Fatalf("accepted target %q does not have the kubelet CSI volume shape", target)
	}
	for _, s := range segs {
		if !fuzzIsSegment(s) || strings.ContainsFunc(s, fuzzIsControl) {
			t.Fatalf("accepted target %q has segment %q", target, s)
		}
	}
	if !fuzzIsUID(segs[1]) {
		t.Fatalf("accepted target %q has pod uid segment %q", target, segs[1])
	}
	// The kubelet names the directory after the pod's volume, a DNS label.
	if errs := validation.IsDNS1123Label(segs[4]); len(errs) > 0 {
		t.Fatalf("accepted target %q has volume name segment %q: %v", target, segs[4], errs)
	}
	if wantUID != "" && segs[1] != wantUID {
		t.Fatalf("accepted target %q of pod %q for pod %q", target, segs[1], wantUID)
	}
	if filepath.Join(root, rel) != target {
		t.Fatalf("accepted target %q resolves to %q", target, filepath.Join(root, rel))
	}
}

func FuzzParsePublishRequest(f *testing.F) {
	const uid = "0f1e2d3c-0000-4000-8000-123456789abc"
	good := map[string]string{
		ctxPodName: "web-1", ctxPodNamespace: "team-a", ctxPodUID: uid,
		ctxServiceAccount: "app", ctxEphemeral: "true", attrSharedSecret: "corp-ca",
	}
	with := func(kv ...string) string {
		m := maps.Clone(good)
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "-" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return fuzzEncodeAttrs(m)
	}
	target := fuzzKubeletRoot + "/pods/" + uid + "/volumes/kubernetes.io~csi/ca/mount"
	// Valid requests of every shape.
	f.Add("csi-0123abcd", target, with(), uint8(0), "")
	f.Add("csi-"+strings.Repeat("a", 64), target, with(attrSharedSecret, "-", attrSharedConfigMap, "trusted.ca",
		attrRefreshResource, "false", ctxServiceAccountTok, `{"x":{"token":"t"}}`), uint8(3), "tmpfs")
	f.Add("csi-1", target, with(attrSharedSecret, "-", attrShares, "secret/corp-ca, configmap/trusted.ca",
		attrItems, "secret/corp-ca/ca.crt=certs/ca.pem:0440, configmap/trusted.ca/bundle", attrDefaultMode, "0400"), uint8(5), "1000")
	f.Add("csi-2", target, with(attrItems, "tls.key=keys/tls.key:0400,ca.crt"), uint8(4), `context="system_u:object_r:container_file_t:s0:c1,c2"`)
	// Valid, with single dots where a second one would be an attack.
	f.Add("csi-0.1", target, with(attrItems, "ca.crt=a.b/c"), uint8(0), "")
	// Invalid ones, each with exactly one thing wrong (regressions of one check show at once,
	// and the fuzzer explores around each), then several at once.
	f.Add("csi-..-x", target, with(), uint8(0), "")
	f.Add("csi/x", target, with(), uint8(0), "")
	f.Add("csi-5", target, with(attrItems, "ca.crt=x,tls.key=x"), uint8(0), "")
	f.Add("csi-5", target, with(attrItems, "ca.crt=a,tls.key=a/b"), uint8(0), "")
	f.Add("csi-5", target, with(attrItems, "ca.crt=a/../../b"), uint8(0), "")
	f.Add("csi-5", target, with(attrShares, "secret/a", attrSharedSecret, "-"), uint8(4), "context=a_t,uid=0")
	f.Add("csi-5", target, with(), uint8(4), `context="a_t",uid=0`)
	f.Add("csi-5", target, with(attrSharedSecret, "-", attrShares, "secret/a, secret/a"), uint8(0), "")
	f.Add("csi-5", fuzzKubeletRoot+"/pods/"+uid+"/volumes/kubernetes.io~csi/a.b/mount", with(), uint8(0), "")
	f.Add("../../etc", fuzzKubeletRoot+"/pods/"+uid+"/volumes/kubernetes.io~csi/../mount", with(attrSharedConfigMap, "x"), uint8(0), "")
	f.Add("a..b", "/var/lib/kubelet//pods/"+uid+"/volumes/kubernetes.io~csi/ca/mount", with(attrRefreshResource, "maybe"), uint8(1), "")
	f.Add(".x", target, with(attrSharedSecret, "", "unknown", "1"), uint8(6), "")
	f.Add("csi-3", target, with(attrItems, "ca.crt=../../etc/passwd,tls.key=/abs,x=..data/y"), uint8(4), "context=a,uid=0")
	f.Add("csi-4", target, with(attrSharedSecret, "-", attrShares, "secret/a,secret/a,pod/b"), uint8(5), "-1")

	f.Fuzz(func(t *testing.T, volumeID, targetPath, attrs string, capKind uint8, capArg string) {
		vc := fuzzDecodeAttrs(attrs)
		req := &csi.NodePublishVolumeRequest{
			VolumeId: volumeID, TargetPath: targetPath, VolumeCapability: fuzzCapability(capKind, capArg), VolumeContext: vc,
			Readonly: capKind < 0xf0, // mostly what the kubelet sends for readOnly: true; sometimes writable
		}
		v, err := parsePublishRequest(req, fuzzKubeletRoot)
		if err != nil {
			// Every rejection is the client's fault and must say so (InvalidArgument).
			var inv *invalidArgument
			if !errors.As(err, &inv) || inv.msg == "" {
				t.Fatalf("rejection %T %q is not an InvalidArgument with a message", err, err)
			}
			return
		}

		// A writable request is never served: the container's own bind would be writable.
		if !req.Readonly {
			t.Fatalf("accepted a writable request")
		}

		// The volume id names a directory under the state dir: one safe segment.
		id := v.VolumeID
		if id != volumeID || !fuzzIsSegment(id) || strings.Contains(id, "..") || strings.HasPrefix(id, ".") || len(id) > 128 {
			t.Fatalf("accepted volume id %q", volumeID)
		}
		const base = "/state/volumes"
		if p := filepath.Join(base, id); filepath.Dir(p) != base || filepath.Base(p) != id {
			t.Fatalf("accepted volume id %q names %q", id, p)
		}

		// The capability is a tmpfs mount; the only mount option that gets through is one SELinux
		// context, which cannot smuggle in another option; the group is a group id.
		switch k := capKind % 7; {
		case k == 3 && capArg != "" && capArg != "tmpfs":
			t.Fatalf("accepted fs_type %q", capArg)
		case k != 0 && k != 3 && k != 4 && k != 5:
			t.Fatalf("accepted capability kind %d (%v)", k, req.VolumeCapability)
		}
		if flags := req.VolumeCapability.GetMount().GetMountFlags(); len(flags) > 0 {
			for _, fl := range flags {
				if fl != v.MountContext {
					t.Fatalf("mount flags %q accepted as the one context %q", flags, v.MountContext)
				}
			}
			opts := fuzzSplitMountOptions("size=4194304,mode=0755," + v.MountContext)
			if len(opts) != 3 || opts[2] != v.MountContext || !strings.HasPrefix(opts[2], "context=") ||
				strings.ContainsAny(v.MountContext, "\x00\n") {
				t.Fatalf("accepted mount flag %q adds the mount options %q", v.MountContext, opts)
			}
		} else if v.MountContext != "" {
			t.Fatalf("mount context %q without mount flags", v.MountContext)
		}
		if g := req.VolumeCapability.GetMount().GetVolumeMountGroup(); g == "" {
			if v.GID != -1 {
				t.Fatalf("no volume_mount_group parsed as gid %d", v.GID)
			}
		} else if n, err := strconv.ParseUint(g, 10, 64); err != nil || n != uint64(v.GID) || v.GID < 0 || v.GID > math.MaxInt32 {
			t.Fatalf("volume_mount_group %q parsed as gid %d", g, v.GID)
		}

		// Pod information is complete and well formed, by the API server's rules.
		if vc[ctxEphemeral] != "true" {
			t.Fatalf("accepted %s=%q", ctxEphemeral, vc[ctxEphemeral])
		}
		if v.PodNamespace != vc[ctxPodNamespace] || v.PodName != vc[ctxPodName] || v.PodUID != vc[ctxPodUID] || v.ServiceAccount != vc[ctxServiceAccount] {
			t.Fatalf("pod information %+v is not the volume context's %q", v, vc)
		}
		if len(validation.IsDNS1123Label(v.PodNamespace)) > 0 || len(validation.IsDNS1123Subdomain(v.PodName)) > 0 ||
			len(validation.IsDNS1123Subdomain(v.ServiceAccount)) > 0 || !fuzzIsUID(v.PodUID) {
			t.Fatalf("accepted malformed pod information %+v", v)
		}

		// The target is exactly this pod's CSI volume path.
		if v.TargetPath != targetPath {
			t.Fatalf("target %q became %q", targetPath, v.TargetPath)
		}
		fuzzCheckCSITarget(t, fuzzKubeletRoot, v.TargetPath, v.PodUID)

		// Exactly one way of naming shares; 1 to 16 distinct shares, each a valid object name.
		secretName, hasSecret := vc[attrSharedSecret]
		cmName, hasCM := vc[attrSharedConfigMap]
		list, hasList := vc[attrShares]
		var want []share.Ref
		switch {
		case hasSecret && !hasCM && !hasList:
			want = []share.Ref{{Kind: share.KindSecret, Name: secretName}}
		case hasCM && !hasSecret && !hasList:
			want = []share.Ref{{Kind: share.KindConfigMap, Name: cmName}}
		case hasList && !hasSecret && !hasCM:
			for _, e := range strings.Split(list, ",") {
				kind, name, _ := strings.Cut(strings.TrimSpace(e), "/")
				want = append(want, share.Ref{Kind: map[string]share.Kind{"secret": share.KindSecret, "configmap": share.KindConfigMap}[kind], Name: name})
			}
		default:
			t.Fatalf("accepted with sharedSecret=%v, sharedConfigMap=%v, shares=%v", hasSecret, hasCM, hasList)
		}
		if !slices.Equal(v.Shares, want) || len(want) < 1 || len(want) > 16 {
			t.Fatalf("shares %q parsed as %v", list, v.Shares)
		}
		for i, s := range v.Shares {
			if s.Kind != share.KindSecret && s.Kind != share.KindConfigMap || len(validation.IsDNS1123Subdomain(s.Name)) > 0 {
				t.Fatalf("accepted share %v", s)
			}
			if slices.Contains(v.Shares[:i], s) {
				t.Fatalf("accepted %v twice", s)
			}
		}

		// refreshResource defaults to true and is otherwise a boolean.
		if s, ok := vc[attrRefreshResource]; ok {
			b, err := strconv.ParseBool(s)
			if err != nil || b != v.Refresh {
				t.Fatalf("refreshResource %q parsed as %v", s, v.Refresh)
			}
		} else if !v.Refresh {
			t.Fatal("refreshResource defaulted to false")
		}

		// Modes are permission bits only; items select valid keys of the volume's shares and
		// name distinct files inside the volume, none of which is another's directory. (What a
		// valid path inside a volume is, the writer's rule, is fuzzed against its own model in
		// internal/atomicwriter: here it is the rule every accepted item must follow.)
		if v.DefaultMode&^0o777 != 0 || (vc[attrDefaultMode] == "" && v.DefaultMode != 0o644) {
			t.Fatalf("defaultMode %q parsed as %v", vc[attrDefaultMode], v.DefaultMode)
		}
		if _, ok := vc[attrItems]; !ok && len(v.Items) > 0 {
			t.Fatalf("items %v without the items attribute", v.Items)
		}
		paths := map[string]bool{}
		for _, it := range v.Items {
			if it.Share < 0 || it.Share >= len(v.Shares) || len(validation.IsConfigMapKey(it.Key)) > 0 ||
				atomicwriter.ValidatePath(it.Path) != nil || it.Mode&^0o777 != 0 || paths[it.Path] {
				t.Fatalf("accepted item %+v of %q", it, vc[attrItems])
			}
			paths[it.Path] = true
			const data = "/vol/..data"
			if p := filepath.Join(data, it.Path); !strings.HasPrefix(p, data+"/") || path.Clean(it.Path) != it.Path {
				t.Fatalf("accepted item path %q names %q", it.Path, p)
			}
		}
		for p := range paths {
			for d := path.Dir(p); d != "."; d = path.Dir(d) {
				if paths[d] {
					t.Fatalf("accepted %q as a file and as the directory of %q", d, p)
				}
			}
		}

		// No attribute the driver does not know, except the kubelet's own.
		known := []string{attrSharedSecret, attrSharedConfigMap, attrShares, attrRefreshResource, attrDefaultMode, attrItems}
		for k := range vc {
			if !slices.Contains(known, k) && !strings.HasPrefix(k, kubeletKeyPrefix) {
				t.Fatalf("accepted unknown attribute %q", k)
			}
		}
	})
}

func FuzzValidateTargetPath(f *testing.F) {
	const uid = "0f1e2d3c-0000-4000-8000-123456789abc"
	f.Add(fuzzKubeletRoot, fuzzKubeletRoot+"/pods/"+uid+"/volumes/kubernetes.io~csi/ca/mount", uid, "ca", "")
	f.Add(fuzzKubeletRoot, fuzzKubeletRoot+"/pods/"+uid+"/volumes/kubernetes.io~csi/ca/mount/", uid, "ca", "/")
	f.Add(fuzzKubeletRoot, fuzzKubeletRoot+"/pods/"+uid+"/volumes/kubernetes.io~csi/a.b/mount", "", "a.b", "")
	f.Add(fuzzKubeletRoot, fuzzKubeletRoot+"/pods/"+uid+"/volumes/kubernetes.io~csi/../mount", "", "..", "")
	f.Add("/", "/pods/"+uid+"/volumes/kubernetes.io~csi/x/mount", "", "x", "/")
	f.Add("/var/lib/kubelet/", "/var/lib/kubelet/pods/"+uid+"/volumes/kubernetes.io~csi/ca/mount/", uid, ".", "")
	f.Add("/var/lib/kubelet", "/var/lib/kubelet-x/pods/"+uid+"/volumes/kubernetes.io~csi/ca/mount", uid, "a/b", "")
	f.Add("/var/lib/kubelet", "/var/lib/kubelet/pods/"+uid+"/volumes/kubernetes.io~csi/ca/./mount", uid, "", "")
	f.Add("/var/lib/kubelet", "/", "", "ca", "/..")
	f.Add(fuzzKubeletRoot, fuzzKubeletRoot+"/pods/"+uid+"/volumes/kubernetes.io~csi/a\x00b/mount", uid, "\x00", "")

	f.Fuzz(func(t *testing.T, root, target, podUID, name, suffix string) {
		// main.go only ever passes an absolute, cleaned root.
		root = filepath.Clean("/" + root)
		check := func(target, podUID string) {
			err := validateTargetPath(root, target, podUID)
			if err != nil {
				var inv *invalidArgument
				if !errors.As(err, &inv) || inv.msg == "" {
					t.Fatalf("rejection %T %q is not an InvalidArgument with a message", err, err)
				}
				return
			}
			fuzzCheckCSITarget(t, root, target, podUID)
		}
		// An arbitrary path, and one that starts as the kubelet's path and goes on: the fuzzer
		// finds near misses of the right shape far sooner from there.
		check(target, podUID)
		kubeletPath := strings.TrimSuffix(root, "/") + "/pods/" + podUID + "/volumes/kubernetes.io~csi/" + name + "/mount"
		check(kubeletPath+suffix, podUID)
		check(kubeletPath+suffix, "")

		// And the other way round: the path the kubelet builds for a valid pod uid and volume
		// name is always accepted, for that pod and for unpublish (no pod uid).
		// (main.go refuses a kubelet root with control characters; the kubelet names the
		// directory after the pod's volume, a DNS label.)
		if fuzzIsUID(podUID) && len(validation.IsDNS1123Label(name)) == 0 && !strings.ContainsFunc(root, fuzzIsControl) {
			if err := validateTargetPath(root, kubeletPath, podUID); err != nil {
				t.Fatalf("kubelet path %q rejected for its pod: %v", kubeletPath, err)
			}
			if err := validateTargetPath(root, kubeletPath, ""); err != nil {
				t.Fatalf("kubelet path %q rejected for unpublish: %v", kubeletPath, err)
			}
		}
	})
}
