package main

import "testing"

// The admin's commands read refreshResource as a publish reads it: true unless "false", and a
// value the driver refuses is an error.
func TestAdminDriverReadsRefreshAsAPublish(t *testing.T) {
	refreshes := adminDriver().Refreshes
	for _, c := range []struct {
		attrs map[string]string
		want  bool
		err   bool
	}{
		{map[string]string{"sharedSecret": "ca"}, true, false},
		{map[string]string{"sharedSecret": "ca", "refreshResource": "false"}, false, false},
		{map[string]string{"sharedSecret": "ca", "refreshResource": "true"}, true, false},
		{map[string]string{"sharedSecret": "ca", "refreshResource": "sometimes"}, false, true},
	} {
		got, err := refreshes(c.attrs)
		if (err != nil) != c.err || err == nil && got != c.want {
			t.Errorf("%v: %v, %v; want %v, error %v", c.attrs, got, err, c.want, c.err)
		}
	}
}
