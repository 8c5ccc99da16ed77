package main

// Specification of projection through a share's list of keys (keyfiles.go): a pod's items pick
// only among the names the share exposes, and the refusal names those names and never another
// key; and, when a list changes where the source cannot be shown through it, which files of a
// share's copy stay (keepShared). Pure: no API server, no disk.

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
	"github.com/shared-resource/csi-driver/internal/share"
	"github.com/shared-resource/csi-driver/internal/volume"
)

// The CA shared without its key: the share exposes ca.crt as ca.pem.
var caOnly = share.Exposure{{Key: "ca.crt", Path: "ca.pem"}}

func TestPodItemsPickAmongTheSharedNames(t *testing.T) {
	src, missing := caOnly.Filter(map[string][]byte{"ca.crt": []byte("CA"), "tls.key": []byte("PRIVATE")})
	if len(missing) != 0 {
		t.Fatal(missing)
	}
	// The exposed name, renamed and moved by the pod, with its own mode.
	files, err := projectFiles(src, []volume.Item{{Key: "ca.pem", Path: "certs/ca.pem", Mode: 0o400}}, 0, 0o644, caOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || string(files["certs/ca.pem"].Data) != "CA" || files["certs/ca.pem"].Mode != 0o400 {
		t.Errorf("got %+v", files)
	}
	// No items: every exposed name, under its own name.
	all, err := projectFiles(src, nil, 0, 0o644, caOnly)
	if err != nil || !slices.Equal(slices.Sorted(maps.Keys(all)), []string{"ca.pem"}) {
		t.Errorf("no items: %+v, %v", all, err)
	}
	// A key the share does not expose, and the source's own name of an exposed key: both refused,
	// with a message naming what the share exposes and neither key asked for.
	for _, key := range []string{"tls.key", "ca.crt"} {
		_, err := projectFiles(src, []volume.Item{{Key: "ca.pem", Path: "ca.pem"}, {Key: key, Path: "x"}}, 0, 0o644, caOnly)
		var ns *notSharedError
		if !errors.As(err, &ns) {
			t.Fatalf("items selecting %q: %v, want a notSharedError", key, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, `entry 2 of the volume's items`) || !strings.Contains(msg, `it exposes only "ca.pem"`) || !strings.Contains(msg, "spec.items") {
			t.Errorf("message %q", msg)
		}
		if strings.Contains(msg, key) {
			t.Errorf("message %q names the key %q the share does not expose", msg, key)
		}
	}
	// Items of another share of the volume are not this share's business.
	if _, err := projectFiles(src, []volume.Item{{Share: 1, Key: "tls.key", Path: "k"}}, 0, 0o644, caOnly); err != nil {
		t.Errorf("another share's item: %v", err)
	}
}

func TestKeepSharedKeepsOnlyWhatTheNewListStillShares(t *testing.T) {
	f := func(s string) atomicwriter.File { return atomicwriter.File{Data: []byte(s), Mode: 0o644} }
	widened := share.Exposure{{Key: "ca.crt", Path: "ca.pem"}, {Key: "tls.crt", Path: "tls.crt"}}
	for _, tc := range []struct {
		name     string
		held     map[string]atomicwriter.File
		items    []volume.Item
		was, now share.Exposure
		want     []string
	}{
		{"narrowed back", map[string]atomicwriter.File{"ca.pem": f("CA"), "tls.crt": f("LEAF")}, nil, widened, caOnly, []string{"ca.pem"}},
		{"from every key to a list", map[string]atomicwriter.File{"ca.crt": f("CA"), "tls.key": f("K")}, nil, nil, share.Exposure{{Key: "ca.crt", Path: "ca.crt"}}, []string{"ca.crt"}},
		{"a list to every key keeps all", map[string]atomicwriter.File{"ca.pem": f("CA")}, nil, share.Exposure{{Key: "ca.pem", Path: "ca.pem"}}, nil, []string{"ca.pem"}},
		// The same name from another key is not the same file: it goes.
		{"name now from another key", map[string]atomicwriter.File{"ca.pem": f("CA")}, nil, caOnly, share.Exposure{{Key: "tls.key", Path: "ca.pem"}}, nil},
		{"renamed", map[string]atomicwriter.File{"ca.pem": f("CA")}, nil, caOnly, share.Exposure{{Key: "ca.crt", Path: "ca.crt"}}, nil},
		{"through the pod's items", map[string]atomicwriter.File{"certs/ca.pem": f("CA"), "certs/leaf": f("LEAF")},
			[]volume.Item{{Key: "ca.pem", Path: "certs/ca.pem"}, {Key: "tls.crt", Path: "certs/leaf"}}, widened, caOnly, []string{"certs/ca.pem"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := keepShared(tc.held, tc.items, 0, tc.was, tc.now)
			if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, tc.want) {
				t.Errorf("kept %v, want %v", keys, tc.want)
			}
		})
	}
}
