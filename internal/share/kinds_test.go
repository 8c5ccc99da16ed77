package share

// The driver's names of the share API are internal/shareapi's, which the admin's commands read:
// the kinds' table has shareapi's rows in its order, and the words the status controller and the
// pin write (defined beside the code that writes them) are the ones shareapi gives the admin's
// diagnose to read.

import (
	"reflect"
	"testing"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

func TestShareKindsAreShareAPIs(t *testing.T) {
	apiKinds := shareapi.AllKinds()
	if len(kinds) != len(apiKinds) {
		t.Fatalf("the driver knows %d kinds of share, shareapi %d", len(kinds), len(apiKinds))
	}
	for i, row := range kinds {
		api := apiKinds[i]
		if shareapi.Kind(row.Kind) != api.Kind || row.TypeName != api.TypeName || row.Resource != api.Resource ||
			row.Attribute != api.Attribute || row.RefField != api.RefField || row.Source != api.Source {
			t.Errorf("row %d: the driver's %+v, shareapi's %+v", i, row, api)
		}
		if row.NewSource == nil || row.Files == nil {
			t.Errorf("row %d (%s): no decoding", i, row.Kind)
		}
	}
}

// What AllKinds returns is the caller's own: changing it changes no kind's row.
func TestAllKindsIsACopy(t *testing.T) {
	rows := AllKinds()
	if !reflect.DeepEqual(kindNames(rows), kindNames(kinds)) {
		t.Fatalf("AllKinds: %v, the table: %v", kindNames(rows), kindNames(kinds))
	}
	rows[0].Attribute = "changed"
	rows[0] = KindInfo{}
	if i, ok := KindSecret.Info(); !ok || i.Attribute != "sharedSecret" || AllKinds()[0].Kind != KindSecret {
		t.Errorf("changing what AllKinds returned changed the table: %+v, %v", i, ok)
	}
}

func kindNames(rows []KindInfo) []Kind {
	var out []Kind
	for _, row := range rows {
		out = append(out, row.Kind)
	}
	return out
}
