package podcmd

import (
	"os/exec"
	"strings"
	"testing"
)

// The in-pod commands run in app pods: they read the pod's own share volume and never the API
// server, so the package needs no Kubernetes client. Its dependencies are the standard library,
// x/sys and the atomic writer, and nothing else may creep in.
func TestInPodCommandsNeedNoKubernetesClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "golang.org/x/sys/"),
			dep == "github.com/shared-resource/csi-driver/internal/atomicwriter",
			dep == "github.com/shared-resource/csi-driver/internal/podcmd":
		default:
			t.Errorf("internal/podcmd depends on %s: the in-pod commands use only the standard library, x/sys and the atomic writer", dep)
		}
	}
}
