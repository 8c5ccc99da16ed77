package volume

// Specification of the node's budget (budget.go): what a volume is charged, and what is in use.
// The budget against the driver's operations is specified in the root's budget tests.

import "testing"

// A volume is charged the larger of what its record says and what a failed reconcile measured,
// and what its tmpfs holds of files removed but kept open on top; a save replaces the first two,
// not the third (a save frees no page a reader keeps open), and only forgetting the volume frees
// it all.
func TestAVolumeIsChargedItsRecordOrMeasureAndItsUnlinkedFiles(t *testing.T) {
	b := &Budget{Limit: 1 << 20}
	b.ChargeSaved("other", 1000, 0) // another volume, charged throughout
	step := func(what string, change func(), want int64) {
		t.Helper()
		change()
		if got, total := b.Charge("v").Bytes(), b.InUse(); got != want || total != want+1000 {
			t.Errorf("%s: the volume is charged %d, %d in all; want %d, and %d", what, got, total, want, want+1000)
		}
	}
	step("saved", func() { b.ChargeSaved("v", 100, 0) }, 100)
	step("files kept open", func() { b.ChargeUnlinked("v", 30) }, 130)
	step("a failed reconcile measured more", func() { b.ChargeUnsaved("v", 200) }, 230)
	step("saved again", func() { b.ChargeSaved("v", 150, 0) }, 180)
	step("closed", func() { b.ChargeUnlinked("v", 0) }, 150)
	step("a failed reconcile measured less", func() { b.ChargeUnsaved("v", 120) }, 150)
	step("forgotten", func() { b.ChargeSaved("v", 0, 0) }, 0)
	step("counted once forgotten", func() { b.ChargeUnlinked("v", 500) }, 0)
	if got := b.Charge("other").Bytes(); got != 1000 {
		t.Errorf("the other volume is charged %d, want 1000", got)
	}
}
