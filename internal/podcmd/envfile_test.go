package podcmd

// Specification of `shared-resource-csi env-file` (envfile.go): what it writes reads back, value
// for value, under the rules of the kubelet's env file parser (single-quoted literal values,
// newlines kept, read line by line with a 64 KiB buffer); names and values it cannot write are
// refused with a message naming the key and what to do, never the value; the file is replaced
// atomically, only in a tmpfs. The real kubelet reads it in test/e2e/pods (envfile_test.go).

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// parseLikeKubelet reads an env file under the rules of the kubelet's parser (Kubernetes 1.37,
// pkg/kubelet/util/env): NAME='VALUE' lines, the value literal up to the next single quote,
// lines read by a bufio.Scanner with its default buffer; blank and # lines skipped.
func parseLikeKubelet(t *testing.T, body []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, "=")
		if !ok || name == "" || strings.TrimRight(name, " \t") != name || !strings.HasPrefix(rest, "'") {
			t.Fatalf("the kubelet would refuse the line %q", line)
		}
		rest = rest[1:]
		var v strings.Builder
		for {
			if i := strings.IndexByte(rest, '\''); i >= 0 {
				v.WriteString(rest[:i])
				if after := strings.TrimLeft(rest[i+1:], " \t"); after != "" && !strings.HasPrefix(after, "#") {
					t.Fatalf("the kubelet would refuse content after the closing quote of %s", name)
				}
				break
			}
			v.WriteString(rest + "\n")
			if !sc.Scan() {
				t.Fatalf("unclosed quote for %s", name)
			}
			rest = sc.Text()
		}
		out[name] = v.String()
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("the kubelet's scanner fails: %v", err)
	}
	return out
}

func TestEnvFileValuesReadBackAsWritten(t *testing.T) {
	files := map[string][]byte{
		"PLAIN":     []byte("s3cr3t"),
		"MULTILINE": []byte("-----BEGIN-----\n  indented\n\nafter a blank line\n-----END-----\n"),
		"HASH":      []byte("a#b # not a comment"),
		"EQUALS":    []byte("k=v=w"),
		"SPACES":    []byte("  lead and trail  "),
		"UNICODE":   []byte("grüße ☃"),
		"QUOTES":    []byte(`"double" and $HOME and \n`),
		"_x1":       []byte("x"),
	}
	body, names, omitted, err := renderEnvFile(files, nil, "")
	if err != nil || omitted != nil {
		t.Fatal(err, omitted)
	}
	if want := "EQUALS, HASH, MULTILINE, PLAIN, QUOTES, SPACES, UNICODE, _x1"; strings.Join(names, ", ") != want {
		t.Errorf("names %v, want every key in order: %s", names, want)
	}
	got := parseLikeKubelet(t, body)
	for k, v := range files {
		if got[k] != string(v) {
			t.Errorf("%s reads back as %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(files) {
		t.Errorf("read back %d variables, want %d", len(got), len(files))
	}
}

func TestEnvFileSelectsAndNamesKeys(t *testing.T) {
	files := map[string][]byte{"tls.crt": []byte("CRT"), "tls.key": []byte("KEY"), "user": []byte("u")}
	body, names, _, err := renderEnvFile(files, []envKey{{"tls.crt", "TLS_CRT"}, {"user", "user"}}, "DB_")
	if err != nil {
		t.Fatal(err)
	}
	got := parseLikeKubelet(t, body)
	if fmt.Sprint(names) != "[DB_TLS_CRT DB_user]" || got["DB_TLS_CRT"] != "CRT" || got["DB_user"] != "u" || len(got) != 2 {
		t.Errorf("names %v, file %q: want DB_TLS_CRT and DB_user only", names, got)
	}
}

// A key asked for by name (--key) that cannot be written is refused; without --key it is left
// out (TestEnvFileLeavesOutWhatItCannotWrite).
func TestEnvFileRefusesWhatItCannotWrite(t *testing.T) {
	const secret = "VERY-SECRET"
	big := strings.Repeat("x", envFileMaxLine)
	for _, c := range []struct {
		name  string
		files map[string][]byte
		keys  []envKey
		want  []string
	}{
		{"a key that is no variable name", map[string][]byte{"tls.crt": []byte(secret)}, nil,
			[]string{`key "tls.crt"`, "cannot be a variable's name", "--key=tls.crt=TLS_CRT"}},
		{"a name starting with a digit", map[string][]byte{"1st": []byte(secret)}, nil,
			[]string{`"1st" cannot be`, "--key=1st=_1ST"}},
		{"a mapping to a bad name", map[string][]byte{"a": []byte(secret)}, []envKey{{"a", "A-B"}},
			[]string{`"A-B" cannot be`}},
		{"a single quote", map[string][]byte{"P": []byte("it's " + secret)}, nil,
			[]string{`key "P"`, "single quote", "mount the share as a file"}},
		{"a value that would add a variable", map[string][]byte{"P": []byte(secret + "'\nLD_PRELOAD='/tmp/x.so")}, nil,
			[]string{`key "P"`, "single quote"}},
		{"a NUL byte", map[string][]byte{"P": []byte(secret + "\x00")}, nil, []string{"NUL"}},
		{"an empty value, which the kubelet reads as a missing key", map[string][]byte{"A": []byte(secret), "P": {}}, nil,
			[]string{`key "P" is empty`, "missing key"}},
		{"a carriage return", map[string][]byte{"P": []byte(secret + "\r\n")}, nil, []string{"carriage return"}},
		{"invalid UTF-8", map[string][]byte{"P": []byte(secret + "\xff")}, nil, []string{"UTF-8"}},
		{"a line the kubelet cannot read", map[string][]byte{"P": []byte(big)}, nil,
			[]string{"a line over 65535 bytes", "mount it as a file"}},
		{"a variable over execve's limit", map[string][]byte{"P": []byte(strings.Repeat(big[:1000]+"\n", 140))}, nil,
			[]string{"over the 131071"}},
		{"a missing key", map[string][]byte{"A": []byte(secret)}, []envKey{{"B", "B"}},
			[]string{`key "B" is not in the share's volume`, `"A"`}},
		{"two keys, one name", map[string][]byte{"a": []byte(secret), "b": []byte(secret)}, []envKey{{"a", "X"}, {"b", "X"}},
			[]string{`keys "a" and "b" would both be the variable X`}},
	} {
		keys := c.keys
		if keys == nil { // every key, each asked for by name
			for _, k := range sortedKeys(c.files) {
				keys = append(keys, envKey{key: k, name: k})
			}
		}
		_, _, _, err := renderEnvFile(c.files, keys, "")
		if err == nil {
			t.Errorf("%s: written, want refused", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the refusal shows the value: %q", c.name, err)
		}
	}
	// Many variables, each within the limits, together over the file's.
	many := map[string][]byte{}
	for i := range 20 {
		many[fmt.Sprintf("V%02d", i)] = []byte(strings.Repeat(big[:60000]+"\n", 1))
	}
	if _, _, _, err := renderEnvFile(many, nil, ""); err == nil || !strings.Contains(err.Error(), "exceed 1048576 bytes") {
		t.Errorf("20 variables of 60 KB: %v, want refused over the file's limit", err)
	}
	// Just under the kubelet's line limit is written, and reads back.
	okLine := strings.Repeat("y", envFileMaxLine-len("P=''"))
	body, _, _, err := renderEnvFile(map[string][]byte{"P": []byte(okLine)}, nil, "")
	if err != nil {
		t.Fatalf("a line of exactly %d bytes: %v", envFileMaxLine, err)
	}
	if got := parseLikeKubelet(t, body); got["P"] != okLine {
		t.Error("a line at the limit does not read back")
	}
}

// Without --key, every key that can be written is, and each one that cannot is left out and
// named, with why: one empty value (or an odd key) does not keep the others from the app. The
// names are the share's (its owner's text) and are quoted, so no message shows a control
// character or starts a line of its own; no value is ever shown. A share of no key that can be
// written is refused.
func TestEnvFileLeavesOutWhatItCannotWrite(t *testing.T) {
	const secret = "VERY-SECRET"
	files := map[string][]byte{
		"A":                               []byte("a " + secret),
		"Z":                               []byte("z"),
		"EMPTY":                           {},
		"tls.crt":                         []byte(secret),
		"QUOTE":                           []byte("it's " + secret),
		"BIN":                             []byte(secret + "\x00"),
		"K\x1b]0;owned\x07\nFAKE=1\u202e": []byte(secret),
	}
	body, names, omitted, err := renderEnvFile(files, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := parseLikeKubelet(t, body); fmt.Sprint(names) != "[A Z]" || len(got) != 2 || got["A"] != "a "+secret || got["Z"] != "z" {
		t.Errorf("names %v, file %q: want A and Z only", names, got)
	}
	if len(omitted) != 5 {
		t.Errorf("left out %d keys, want 5: %q", len(omitted), omitted)
	}
	for _, want := range []string{`key "BIN": its value holds a NUL byte`, `key "EMPTY" is empty`, `key "QUOTE": its value holds a single quote`,
		`key "tls.crt": "tls.crt" cannot be a variable's name`, `key "K\x1b]0;owned\a\nFAKE=1\u202e"`} {
		if !slices.ContainsFunc(omitted, func(m string) bool { return strings.HasPrefix(m, want) }) {
			t.Errorf("no message starts %s: %q", want, omitted)
		}
	}
	for _, m := range omitted {
		if strings.Contains(m, secret) || strings.ContainsFunc(m, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0x202e }) {
			t.Errorf("message %q shows a value or a control character", m)
		}
	}
	// An empty key asked for by name is refused, saying why.
	if _, _, _, err := renderEnvFile(files, []envKey{{"A", "A"}, {"EMPTY", "EMPTY"}}, ""); err == nil || !strings.Contains(err.Error(), `key "EMPTY" is empty`) {
		t.Errorf("--key EMPTY: %v, want refused naming the empty key", err)
	}
	// Nothing left to write: refused, not an empty file.
	if _, _, omitted, err := renderEnvFile(map[string][]byte{"EMPTY": {}, "a.b": []byte("x")}, nil, ""); err == nil || len(omitted) != 2 {
		t.Errorf("no key writable: %v (%q), want refused with both named", err, omitted)
	}
	// The command: written (exit 0), and what was left out said on stderr, a line a key.
	share := t.TempDir()
	if err := (atomicwriter.Writer{Dir: share, GID: -1}).Write(map[string]atomicwriter.File{
		"USER": {Data: []byte("alice"), Mode: 0o644}, "EMPTY": {Data: []byte{}, Mode: 0o644},
	}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join("/dev/shm", t.Name()+fmt.Sprint(os.Getpid()))
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatalf("this test needs a tmpfs at /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	var stderr bytes.Buffer
	code := runEnvFileCommand([]string{"--dir", share, "--out", out + "/share.env"}, &stderr)
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], `shared-resource-csi env-file: left out: key "EMPTY" is empty`) ||
		!strings.Contains(lines[1], "wrote 1 variable(s)") {
		t.Errorf("exit %d, stderr %q: want 0, the empty key left out, then USER written", code, stderr.String())
	}
	if b, err := os.ReadFile(out + "/share.env"); err != nil || string(b) != "USER='alice'\n" {
		t.Errorf("the env file holds %q (%v), want USER only", b, err)
	}
	if code := runEnvFileCommand([]string{"--dir", share, "--out", out + "/share.env", "--key", "EMPTY"}, &stderr); code != 1 {
		t.Errorf("--key EMPTY: exit %d, want 1", code)
	}
}

// The command end to end on a share written as the driver writes it: into a tmpfs it writes the
// file atomically (0600, no temporary file left); it refuses an --out outside a tmpfs, an
// empty (revoked) view (emptying the file) and a dir that is no share; it prints names, never values.
func TestEnvFileCommand(t *testing.T) {
	share := t.TempDir()
	if err := (atomicwriter.Writer{Dir: share, GID: -1}).Write(map[string]atomicwriter.File{
		"USER": {Data: []byte("alice"), Mode: 0o644}, "PASSWORD": {Data: []byte("VALUE-NEVER-PRINTED"), Mode: 0o644},
	}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join("/dev/shm", t.Name()+fmt.Sprint(os.Getpid()))
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatalf("this test needs a tmpfs at /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	// A temporary file left by a run killed while writing, and a file of the user's own of a
	// like name, which is not env-file's to delete.
	if err := os.WriteFile(out+"/.share.env"+envFileTempInfix+"12345", []byte("old values"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out+"/.share.env.bak", []byte("the user's"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := runEnvFileCommand([]string{"--dir", share, "--out", out + "/share.env"}, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "VALUE-NEVER-PRINTED") || strings.Contains(stderr.String(), "alice") {
		t.Errorf("printed a value: %s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "wrote 2 variable(s)") || !strings.Contains(stderr.String(), "PASSWORD, USER") {
		t.Errorf("does not say what it wrote: %s", stderr.String())
	}
	b, err := os.ReadFile(out + "/share.env")
	if err != nil {
		t.Fatal(err)
	}
	if got := parseLikeKubelet(t, b); got["PASSWORD"] != "VALUE-NEVER-PRINTED" || got["USER"] != "alice" {
		t.Errorf("file reads %v", got)
	}
	if st, _ := os.Stat(out + "/share.env"); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(out); len(ents) != 2 {
		t.Errorf("%d entries in the out dir, want the file and the user's .share.env.bak (no temporary file left, the stale one removed)", len(ents))
	}
	if _, err := os.Stat(out + "/.share.env.bak"); err != nil {
		t.Errorf("a file env-file did not make was removed: %v", err)
	}

	// A dir on disk: the package's own dir is on the checkout's file system.
	onDisk, err := os.MkdirTemp(".", ".envfile-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(onDisk) })
	if isTmpfs(t, onDisk) {
		t.Fatalf("%s is a tmpfs: run this test from a checkout on disk", onDisk)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"not a tmpfs", []string{"--dir", share, "--out", onDisk + "/x.env"}, 1, "medium: Memory"},
		{"not a share", []string{"--dir", t.TempDir(), "--out", out + "/y.env"}, 1, "no readable ..data"},
		{"no --out", []string{"--dir", share}, 2, "--out is required"},
		{"a bad --key", []string{"--dir", share, "--out", out + "/y.env", "--key", "A="}, 2, "want KEY or KEY=NAME"},
	} {
		stderr.Reset()
		if code := runEnvFileCommand(c.args, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: exit %d %q, want %d saying %q", c.name, code, stderr.String(), c.code, c.want)
		}
	}

	// A key asked for with --key leaves the view (one share of several revoked, or the key no
	// longer shared): refused, and the env file written before is emptied, so its last value is
	// not read by a container that starts from it anyway.
	if code := runEnvFileCommand([]string{"--dir", share, "--out", out + "/keyed.env", "--key", "PASSWORD"}, &stderr); code != 0 {
		t.Fatalf("--key PASSWORD: exit %d: %s", code, stderr.String())
	}
	if err := (atomicwriter.Writer{Dir: share, GID: -1}).Write(map[string]atomicwriter.File{"USER": {Data: []byte("alice"), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := runEnvFileCommand([]string{"--dir", share, "--out", out + "/keyed.env", "--key", "PASSWORD"}, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "PASSWORD") || !strings.Contains(stderr.String(), "now holds no variable") {
		t.Errorf("a key asked for that left the view: exit %d %q, want 1 naming it and the emptied file", code, stderr.String())
	}
	if b2, err := os.ReadFile(out + "/keyed.env"); err != nil || len(b2) != 0 {
		t.Errorf("after a key asked for left the view the env file holds %q (%v), want nothing", b2, err)
	}

	// Revoked: the driver swaps in an empty view.
	if err := (atomicwriter.Writer{Dir: share, GID: -1}).Write(map[string]atomicwriter.File{}); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := runEnvFileCommand([]string{"--dir", share, "--out", out + "/share.env"}, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "SharedResourceAccessRevoked") || !strings.Contains(stderr.String(), "now holds no variable") {
		t.Errorf("an empty view: exit %d %q, want 1 naming the revocation and the emptied file", code, stderr.String())
	}
	// The revoked values leave the env file: a container reading it finds none.
	if b2, err := os.ReadFile(out + "/share.env"); err != nil || len(b2) != 0 {
		t.Errorf("after an empty view the env file holds %q (%v), want nothing", b2, err)
	}
}

func isTmpfs(t *testing.T, dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC
}
