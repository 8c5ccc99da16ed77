package admin

import (
	"os/exec"
	"strings"
	"testing"
)

// The admin's commands judge what the driver judges through the functions the root hands them
// (admindriver.go), never by reaching into the node plugin's own packages: of this module they
// import only the API's names and the clients they build. A package of the driver's imported here
// would let an admin's kubectl depend on, and one day change, what the node plugin holds.
func TestAdminCommandsReachNoDriverInternals(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	const module = "github.com/shared-resource/csi-driver/"
	for _, dep := range strings.Fields(string(out)) {
		switch dep {
		case module + "internal/admin", module + "internal/shareapi", module + "internal/kubeclient":
		default:
			if strings.HasPrefix(dep, module) {
				t.Errorf("internal/admin depends on %s: the admin's commands import of this module only internal/shareapi and internal/kubeclient", dep)
			}
		}
	}
}
