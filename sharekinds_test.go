package main

// The driver's names of the share API are internal/shareapi's, which the admin's commands read:
// the kinds' table has shareapi's rows in its order, and the words the status controller and the
// pin write (defined beside the code that writes them) are the ones shareapi gives the admin's
// diagnose to read.

import (
	"testing"

	"github.com/shared-resource/csi-driver/internal/shareapi"
)

func TestShareKindsAreShareAPIs(t *testing.T) {
	if len(shareKindTable) != len(shareapi.Kinds) {
		t.Fatalf("the driver knows %d kinds of share, shareapi %d", len(shareKindTable), len(shareapi.Kinds))
	}
	for i, row := range shareKindTable {
		api := shareapi.Kinds[i]
		if shareapi.Kind(row.kind) != api.Kind || row.typeName != api.TypeName || row.resource != api.Resource ||
			row.attribute != api.Attribute || row.refField != api.RefField || row.source != api.Source {
			t.Errorf("row %d: the driver's %+v, shareapi's %+v", i, row, api)
		}
		if row.newSource == nil || row.files == nil {
			t.Errorf("row %d (%s): no decoding", i, row.kind)
		}
	}
}

func TestStatusWordsAreShareAPIs(t *testing.T) {
	for _, c := range []struct{ driver, api string }{
		{conditionReady, shareapi.ConditionReady},
		{reasonSourceNotFound, shareapi.ReasonSourceNotFound},
		{reasonSourceForbidden, shareapi.ReasonSourceForbidden},
		{reasonSourceReplaced, shareapi.ReasonSourceReplaced},
		{reasonSourceKeyMissing, shareapi.ReasonSourceKeyMissing},
		{pinField, shareapi.PinField},
		{recreationField, shareapi.RecreationField},
		{recreationFollow, shareapi.RecreationFollow},
	} {
		if c.driver != c.api {
			t.Errorf("the driver writes %q where the admin's commands read %q", c.driver, c.api)
		}
	}
}
