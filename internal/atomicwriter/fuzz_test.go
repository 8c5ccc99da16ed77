package atomicwriter

// Fuzz targets for the writer: its name rules (ValidateKey, ValidatePath) and Write itself, over
// sequences of payloads. Each target states invariants that must hold for every input, checked
// with oracles that share no code with the code under test (the API server's own validation
// from k8s.io/apimachinery, plain string arithmetic on segments, os calls on the result), so a
// bug in a validator cannot hide itself.
//
// `go test` runs the seeds as ordinary tests; hack/fuzz.sh fuzzes each target for a bounded
// number of executions.

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/shared-resource/csi-driver/internal/treesnap"
)

// fuzzIsSegment: s names exactly one directory entry (no separator, not "." or "..", no NUL,
// which no system call takes).
func fuzzIsSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// fuzzValidPath is the rule for a file path inside a volume: 1-4096 bytes, relative, at most 16
// segments, each a key the API server accepts (which also excludes "", ".", ".." and names
// starting with "..", the writer's own).
func fuzzValidPath(p string) bool {
	if p == "" || len(p) > 4096 || strings.HasPrefix(p, "/") {
		return false
	}
	segs := strings.Split(p, "/")
	if len(segs) > 16 {
		return false
	}
	for _, s := range segs {
		if len(validation.IsConfigMapKey(s)) > 0 {
			return false
		}
	}
	return true
}

// FuzzValidateKey checks both name rules of the writer: ValidateKey (a Secret/ConfigMap key, one
// file name) and ValidatePath (an item's path inside the volume, segments of keys).
func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"ca.crt", ".dockerconfigjson", "a..b", "x.", "", ".", "..", "..data", "...", "../etc", "a/b",
		"/abs", "a\x00b", "ümlaut", strings.Repeat("k", 253), strings.Repeat("k", 254),
		"certs/ca.pem", "a/../b", "a//b", "a/", "a/..data/b", "a/./b", strings.Repeat("d/", 15) + "f", strings.Repeat("d/", 16) + "f"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		// The API server's rule for Secret and ConfigMap keys is the oracle, both ways: a key
		// the API accepted must be writable, and nothing else may be.
		if apiErrs := validation.IsConfigMapKey(key); (err == nil) != (len(apiErrs) == 0) {
			t.Fatalf("ValidateKey(%q) = %v, but the API server's validation says %q", key, err, apiErrs)
		}
		if err != nil {
			// The message names the key, so the admin finds it.
			if !strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Fatalf("error %q does not name the key %q", err, key)
			}
		} else {
			if !fuzzIsSegment(key) || strings.HasPrefix(key, "..") || len(key) > 253 {
				t.Fatalf("accepted key %q", key)
			}
			const dir = "/vol/..data"
			if p := filepath.Join(dir, key); filepath.Dir(p) != dir || filepath.Base(p) != key {
				t.Fatalf("accepted key %q names %q", key, p)
			}
		}

		err = ValidatePath(key)
		if (err == nil) != fuzzValidPath(key) {
			t.Fatalf("ValidatePath(%q) = %v, but the rule says valid=%v", key, err, fuzzValidPath(key))
		}
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(key)) {
				t.Fatalf("error %q does not name the path %q", err, key)
			}
			return
		}
		// Accepted paths stay below the payload dir and never reach the writer's own entries.
		const dir = "/vol/..2026_01_01_00_00_00.1"
		p := filepath.Join(dir, key)
		if !strings.HasPrefix(p, dir+"/") || p != dir+"/"+key {
			t.Fatalf("accepted path %q names %q", key, p)
		}
		for _, s := range strings.Split(key, "/") {
			if strings.HasPrefix(s, "..") {
				t.Fatalf("accepted path %q has the reserved segment %q", key, s)
			}
		}
	})
}

// fuzzPayload is one call of Write.
type fuzzPayload struct {
	gid   int
	files map[string]File
}

// fuzzPathAlphabet: bytes are mapped onto it for most names, so that the fuzzer mostly produces
// names the API could hold (and among them nested paths, empty segments and reserved "..x"
// names), plus raw bytes for the rest.
const fuzzPathAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/"

// fuzzModes: valid permission bits, and two invalid ones (a setuid bit, a stray high bit).
var fuzzModes = []os.FileMode{0o644, 0o600, 0o440, 0o400, 0o755, 0o444, os.ModeSetuid | 0o755, 0o1644}

// fuzzGids: no fsGroup (-1, or any negative), root's, another, one chown cannot take.
var fuzzGids = []int{-1, 0, 1234, -7, math.MaxUint32}

// fuzzDecodePayloads reads a sequence of payloads from data. Per payload: a header byte (low 3
// bits: number of files, bit 3: flat, high 4 bits: flat mode), a gid byte, then per file a name
// length byte (bit 7: raw bytes instead of the alphabet, bit 6: +220 bytes, past the 253-byte
// key limit), the name, a mode byte, a value length byte and the value. A flat payload is the
// shape the driver wrote before items and fsGroup existed: every file gets the flat mode, and
// the gid byte is ignored for no group (-1).
func fuzzDecodePayloads(data []byte) []fuzzPayload {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	take := func(n int) []byte {
		n = min(n, len(data))
		b := data[:n:n]
		data = data[n:]
		return b
	}
	var out []fuzzPayload
	for len(data) > 0 && len(out) < 8 {
		hdr := next()
		flat, flatMode := hdr&8 != 0, fuzzModes[int(hdr>>4)%len(fuzzModes)]
		p := fuzzPayload{gid: fuzzGids[int(next())%len(fuzzGids)], files: map[string]File{}}
		if flat {
			p.gid = -1
		}
		for range int(hdr & 7) {
			nb := next()
			n := int(nb & 0x3f)
			if nb&0x40 != 0 {
				n += 220
			}
			name := bytes.Clone(take(n))
			if nb&0x80 == 0 {
				for i, c := range name {
					name[i] = fuzzPathAlphabet[int(c)%len(fuzzPathAlphabet)]
				}
			}
			mode := fuzzModes[int(next())%len(fuzzModes)]
			if flat {
				mode = flatMode
			}
			p.files[string(name)] = File{Data: bytes.Clone(take(int(next()))), Mode: mode}
		}
		out = append(out, p)
	}
	return out
}

// fuzzEncodePayload is the inverse of fuzzDecodePayloads for seeds: names of the alphabet and
// shorter than 64 bytes, modes and gid as indexes into fuzzModes and fuzzGids.
func fuzzEncodePayload(flat bool, mode, gid int, files map[string]string, modes map[string]int) []byte {
	hdr := byte(mode<<4 | len(files))
	if flat {
		hdr |= 8
	}
	out := []byte{hdr, byte(gid)}
	for _, k := range slices.Sorted(maps.Keys(files)) {
		out = append(out, byte(len(k)))
		for _, c := range []byte(k) {
			out = append(out, byte(strings.IndexByte(fuzzPathAlphabet, c)))
		}
		out = append(out, byte(modes[k]), byte(len(files[k])))
		out = append(out, files[k]...)
	}
	return out
}

// fuzzPayloadValid says, by the rules and not by the writer's code, whether the writer must
// accept p.
func fuzzPayloadValid(p fuzzPayload) bool {
	for name, f := range p.files {
		if f.Mode&^0o777 != 0 || !fuzzValidPath(name) {
			return false
		}
		for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
			if _, ok := p.files[d]; ok {
				return false // both a file and a directory
			}
		}
	}
	return p.gid <= math.MaxUint32-1
}

// FuzzWrite writes a sequence of payloads into one dir: each valid payload must be published
// exactly (checkLayout), each invalid one refused with the dir left unchanged.
func FuzzWrite(f *testing.F) {
	f.Add(fuzzEncodePayload(true, 0, 0, map[string]string{"ca.crt": "one", "tls.key": "two"}, nil))
	f.Add(slices.Concat(
		fuzzEncodePayload(true, 0, 0, map[string]string{"a": "1", "b": "2"}, nil),
		fuzzEncodePayload(true, 1, 0, map[string]string{"b": "3", "c": ""}, nil),
		fuzzEncodePayload(true, 0, 0, map[string]string{}, nil),
		fuzzEncodePayload(true, 2, 0, map[string]string{"a": "1"}, nil)))
	f.Add(slices.Concat(
		fuzzEncodePayload(true, 0, 0, map[string]string{"ok": "x"}, nil),
		fuzzEncodePayload(true, 0, 0, map[string]string{"..data": "evil", "ok": "y"}, nil),
		fuzzEncodePayload(true, 0, 0, map[string]string{".hidden": "z"}, nil)))
	f.Add(slices.Concat(
		fuzzEncodePayload(true, 0, 0, map[string]string{"..": "x"}, nil),
		[]byte{0x09, 0, 0x85, '.', '.', '/', 'e', 't', 0, 1, 'x'}, // flat, raw key "../et"
		fuzzEncodePayload(true, 3, 0, map[string]string{"k": "v"}, nil)))
	// A nested payload refused before any was accepted: the dir must not even be created.
	f.Add(slices.Concat(
		fuzzEncodePayload(false, 0, 0, map[string]string{"a/../b": "1"}, nil),
		fuzzEncodePayload(false, 0, 0, map[string]string{"a/b": "1"}, nil)))
	// Nested paths, modes, fsGroup; then a file that is also a directory, ".." inside a path,
	// a reserved segment, a setuid mode and a gid chown cannot take: all refused, nothing changed.
	f.Add(slices.Concat(
		fuzzEncodePayload(false, 0, 1, map[string]string{"certs/ca.pem": "1", "certs/sub/x": "2", "tls.key": "3"}, map[string]int{"tls.key": 3}),
		fuzzEncodePayload(false, 0, 2, map[string]string{"certs/ca.pem": "4", "other/y": "5"}, map[string]int{"other/y": 2}),
		fuzzEncodePayload(false, 0, 0, map[string]string{"a": "1", "a/b": "2"}, nil),
		fuzzEncodePayload(false, 0, 0, map[string]string{"a/../../b": "1"}, nil),
		fuzzEncodePayload(false, 0, 0, map[string]string{"a/..data/b": "1"}, nil),
		fuzzEncodePayload(false, 0, 0, map[string]string{"a": "1"}, map[string]int{"a": 6}),
		fuzzEncodePayload(false, 0, 4, map[string]string{"a": "1"}, nil),
		fuzzEncodePayload(false, 0, 3, map[string]string{}, nil)))

	f.Fuzz(func(t *testing.T, data []byte) {
		dir := filepath.Join(t.TempDir(), "vol")
		var want map[string]File // the last valid payload; nil until there is one
		wantGID := -1            // and its gid
		for i, p := range fuzzDecodePayloads(data) {
			if os.Geteuid() != 0 && p.gid >= 0 && p.gid <= math.MaxUint32-1 {
				p.gid = -1 // with a group, Write makes uid 0 the owner, which only root may do
			}
			valid := fuzzPayloadValid(p)
			var before map[string]string
			if !valid {
				before = snapshot(t, dir)
			}
			err := Writer{Dir: dir, GID: p.gid}.Write(p.files)
			switch {
			case valid && err != nil:
				t.Fatalf("write %d of the valid payload %v failed: %v", i, slices.Sorted(maps.Keys(p.files)), err)
			case valid:
				want, wantGID = p.files, p.gid
			case err == nil:
				t.Fatalf("write %d of the invalid payload %q (gid %d) succeeded", i, slices.Sorted(maps.Keys(p.files)), p.gid)
			default:
				if diff := treesnap.Diff(before, snapshot(t, dir)); diff != "" {
					t.Fatalf("write %d of an invalid payload failed (%v) but changed the dir:\n%s", i, err, diff)
				}
			}
			if want == nil {
				// Nothing valid written yet: invalid payloads are refused before anything is
				// created, and readers see the empty set.
				if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("dir exists before any valid write: %v", err)
				}
				if got, err := ReadFiles(dir); err != nil || len(got) != 0 {
					t.Fatalf("ReadFiles before any valid write: %d files, %v", len(got), err)
				}
				continue
			}
			checkLayout(t, dir, want, wantGID)
		}
	})
}
