package shareapi

import "testing"

// What AllKinds returns is the caller's own: changing it changes no kind's row.
func TestAllKindsIsACopy(t *testing.T) {
	rows := AllKinds()
	if len(rows) != len(kinds) || rows[0].Kind != KindSecret {
		t.Fatalf("AllKinds: %+v, the table: %+v", rows, kinds)
	}
	rows[0] = KindInfo{}
	if KindSecret.TypeName() != "SharedSecret" || AllKinds()[0].Kind != KindSecret {
		t.Errorf("changing what AllKinds returned changed the table: %+v", kinds)
	}
}
