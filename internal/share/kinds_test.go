package share

// The driver's names of the share API are internal/shareapi's, which the admin's commands read:
// the kinds' table has shareapi's rows in its order, and the words the status controller and the
// pin write (defined beside the code that writes them) are the ones shareapi gives the admin's
// diagnose to read.

import (
	"testing"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

func TestShareKindsAreShareAPIs(t *testing.T) {
	if len(Kinds) != len(shareapi.Kinds) {
		t.Fatalf("the driver knows %d kinds of share, shareapi %d", len(Kinds), len(shareapi.Kinds))
	}
	for i, row := range Kinds {
		api := shareapi.Kinds[i]
		if shareapi.Kind(row.Kind) != api.Kind || row.TypeName != api.TypeName || row.Resource != api.Resource ||
			row.Attribute != api.Attribute || row.RefField != api.RefField || row.Source != api.Source {
			t.Errorf("row %d: the driver's %+v, shareapi's %+v", i, row, api)
		}
		if row.NewSource == nil || row.Files == nil {
			t.Errorf("row %d (%s): no decoding", i, row.Kind)
		}
	}
}
