package swap

import (
	"testing"

	"github.com/shared-resource/csi-driver/test/e2e/framework"
)

// TestMain runs the suite from the repository's root (framework.Main).
func TestMain(m *testing.M) { framework.Main(m) }
