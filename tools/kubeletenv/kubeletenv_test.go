package kubeletenv

// Specification of `shared-resource-csi env-file` (the driver's binary, as an init container runs
// it) against the kubelet's own env file parser at the version this module requires: every value
// env-file writes, the kubelet reads back value for value; every value or name that the parser of
// 1.37 or of 1.38 would read as something else (or refuse), env-file refuses, naming the key. The
// same tests run against the newest supported minor (`make tools-test`) and the next minor's
// pre-release (hack/kube-next.sh), so a value passes only if both parsers read it as written.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The longest line the kubelet reads (bufio.Scanner's 64 KiB buffer, the newline included).
const maxLine = 64<<10 - 1

// accepted are values env-file writes: each must read back as it is, at every parser version.
var accepted = map[string]string{
	"PLAIN":             "s3cr3t",
	"PEM":               "-----BEGIN KEY-----\n  indented\n\nafter a blank line\n-----END KEY-----\n",
	"HASH":              "v#x",  // inside the quotes: the value, not a comment
	"HASH_SPACE":        "v #x", // likewise
	"COMMENT_LIKE_LINE": "first\n# looks like a comment\n  # and so does this\nlast",
	"LINE_LIKE_LINE":    "x\nOTHER=y\n",
	"EQUALS":            "=k=v=",
	"SPACES":            "  lead and trail  ",
	"TABS":              "\tx\t",
	"NEWLINES":          "\n\n",
	"UNICODE":           "grüße ☃",
	"SHELL":             `"double" and $HOME and \n and $(cmd) and ` + "`cmd`",
	"LONGEST_LINE":      "a\n" + strings.Repeat("x", maxLine) + "\nb",
	"_lower_1":          "x",
}

func TestEnvFileValuesReadBackByTheKubeletsParser(t *testing.T) {
	version := parserVersion(t)
	out := writeEnvFile(t, accepted)
	for name, want := range accepted {
		got, found, err := Read(out, name)
		if err != nil || !found || got != want {
			t.Errorf("the kubelet %s reads %s as %.40q (found %v, error %v), want %.40q", version, name, got, found, err, want)
		}
	}
	// A variable env-file did not write is not found, and is no error (the kubelet then fails
	// the container unless the reference is optional).
	if got, found, err := Read(out, "ABSENT"); err != nil || found {
		t.Errorf("the kubelet %s reads ABSENT as %q (found %v, error %v), want not found", version, got, found, err)
	}
}

// refused are values and names whose line, written as env-file writes lines (NAME='VALUE'), a
// parser reads as something else or refuses. misreadBy: the minors whose parser does. env-file
// refuses every one, whichever minor misreads it.
var refused = []struct {
	why, key, value, prefix string
	misreadBy               []string
}{
	// NAME='v'#x: 1.37 reads v (# starts a comment); 1.38 refuses # right after the quote.
	{"a quote, then #", "QUOTE_HASH", "v'#x", "", []string{"1.37", "1.38"}},
	// NAME='v' #x': both read v.
	{"a quote, a blank, then #", "QUOTE_COMMENT", "v' #x", "", []string{"1.37", "1.38"}},
	{"a quote inside", "QUOTE", "it's", "", []string{"1.37", "1.38"}},
	// 1.37's kubelet takes an empty value for a missing key; 1.38 reads it as empty.
	{"an empty value", "EMPTY", "", "", []string{"1.37"}},
	// bufio.Scanner drops a carriage return before a newline.
	{"a carriage return", "CRLF", "a\r\nb", "", []string{"1.37", "1.38"}},
	{"a line over the scanner's buffer", "LONG", strings.Repeat("x", maxLine+1), "", []string{"1.37", "1.38"}},
	// NAME ='v': both refuse whitespace before =.
	{"a blank before =", "BLANK ", "v", "", []string{"1.37", "1.38"}},
	// X= NAME='v': 1.37 reads X as empty and finds no NAME; 1.38 refuses the line.
	{"a name holding = and a blank", "SPACE", "v", "X= ", []string{"1.37", "1.38"}},
}

func TestEnvFileRefusesWhatAParserReadsOtherwise(t *testing.T) {
	version := parserVersion(t)
	minor := strings.Join(strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)[:2], ".")
	dir := tmpfsDir(t)
	for _, c := range refused {
		t.Run(c.why, func(t *testing.T) {
			// What this minor's parser makes of the line: the reason env-file must refuse it.
			name := c.prefix + c.key
			naive := filepath.Join(dir, c.key+".naive")
			if err := os.WriteFile(naive, []byte("OK='ok'\n"+name+"='"+c.value+"'\nLAST='last'\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			got, found, err := Read(naive, name)
			misread := err != nil || !found || got != c.value
			want := false
			for _, m := range c.misreadBy {
				want = want || m == minor
			}
			if misread != want {
				t.Errorf("the kubelet %s reads %s='%.20q' as %.20q (found %v, error %v): misread %v, the table says %v for %s",
					version, name, c.value, got, found, err, misread, want, minor)
			}

			// env-file refuses it, naming the key and never the value, and writes nothing.
			// Beside a key it can write, unless the prefix makes every name one it cannot.
			files := map[string]string{c.key: c.value}
			if c.prefix == "" {
				files["OK"] = "ok"
			}
			share := writeShare(t, files)
			args := []string{"env-file", "--dir", share, "--out", filepath.Join(dir, c.key+".env")}
			if c.prefix != "" {
				args = append(args, "--prefix", c.prefix)
			}
			msg, code := runEnvFile(t, args...)
			if code != 1 || !strings.Contains(msg, c.key) {
				t.Errorf("env-file with %s: exit %d, want 1 and a message naming %s:\n%s", c.why, code, c.key, msg)
			}
			if len(c.value) > 1 && strings.Contains(msg, c.value) {
				t.Errorf("env-file printed the value: %s", msg)
			}
			if _, err := os.Stat(filepath.Join(dir, c.key+".env")); err == nil {
				t.Errorf("env-file wrote %s.env though it refused", c.key)
			}
		})
	}
}

// parserVersion is the version of the parser under test, logged so that each run says which.
func parserVersion(t *testing.T) string {
	t.Helper()
	v, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the kubelet's env file parser of k8s.io/kubernetes %s", v)
	return v
}

// driverBinary is the driver's binary (make build), or $DRIVER_BINARY. In CI its absence fails
// the test; elsewhere it skips, saying what to run.
func driverBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("DRIVER_BINARY")
	if bin == "" {
		bin, _ = filepath.Abs("../../_output/bin/shared-resource-csi")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no driver binary: %v (run `make build`, or set DRIVER_BINARY)", err)
		}
		t.Skipf("no driver binary: %v (run `make build`, or set DRIVER_BINARY)", err)
	}
	return bin
}

// runEnvFile runs the driver's binary with args and returns what it printed and its exit code.
func runEnvFile(t *testing.T, args ...string) (string, int) {
	t.Helper()
	b, err := exec.Command(driverBinary(t), args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(b), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), 0
}

// writeShare lays files out as the driver does in a volume (a timestamped payload dir, ..data
// pointing at it, a link per key) and returns the dir.
func writeShare(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	payload := "..2026_01_02_03_04_05.123456789"
	if err := os.Mkdir(filepath.Join(dir, payload), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, payload, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(payload, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeEnvFile runs env-file on a share of files and returns the env file it wrote.
func writeEnvFile(t *testing.T, files map[string]string) string {
	t.Helper()
	out := filepath.Join(tmpfsDir(t), "share.env")
	if msg, code := runEnvFile(t, "env-file", "--dir", writeShare(t, files), "--out", out); code != 0 {
		t.Fatalf("env-file: exit %d:\n%s", code, msg)
	}
	return out
}

// tmpfsDir is a dir of the test's own in /dev/shm: env-file writes only into a tmpfs, as an
// emptyDir with medium: Memory is.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	const tmpfsMagic = 0x01021994 // TMPFS_MAGIC, linux/magic.h
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != tmpfsMagic {
		t.Fatalf("this test needs a tmpfs at /dev/shm (statfs: %v, type %#x)", err, st.Type)
	}
	dir, err := os.MkdirTemp("/dev/shm", "kubeletenv-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
