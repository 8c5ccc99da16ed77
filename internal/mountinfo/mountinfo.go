package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Entry is one line of /proc/self/mountinfo (see proc(5)).
type Entry struct {
	MajorMinor   string // "0:52"
	Root         string // root of the mount within its filesystem, e.g. "/" or "/data"
	MountPoint   string // unescaped (mountinfo escapes space, tab, newline, backslash as \040 \011 \012 \134)
	Options      string // per-mount options, e.g. "ro,nosuid,nodev,noexec,relatime"
	FSType       string
	Source       string
	SuperOptions string
}

// Read parses /proc/self/mountinfo.
//
// The file is read until two consecutive reads are identical: on older kernels
// (before the mount-table cursor, Linux 5.8) a read split over several chunks
// while mounts change can skip or repeat entries, and a skipped entry would
// make a mounted volume look unmounted. On a busy node other pods' mounts may
// change on every read; since Linux 5.8 a single read is consistent for the
// entries that exist throughout it (the driver's own mounts do: it holds the
// volume's lock), so churn elsewhere is never a reason to fail: after the last
// attempt the last read is used.
func Read() ([]Entry, error) {
	const (
		path     = "/proc/self/mountinfo"
		attempts = 10
	)
	prev, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if mountCursorKernel() {
		// One read is consistent (see mountCursorKernel); reading again while other pods'
		// mounts change would only add sleeps and more reads of the whole table.
		return Parse(bytes.NewReader(prev))
	}
	for i := range attempts - 1 {
		cur, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(prev, cur) {
			break
		}
		prev = cur
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	return Parse(bytes.NewReader(prev))
}

// Parse parses the mountinfo format:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7..)  (-) (8)    (9)        (10)
//
// Fields are split on single spaces rather than runs of whitespace because the
// kernel prints an empty source as an empty field, and real spaces inside
// paths are always escaped. It never panics on malformed input; it returns an
// error naming the line instead.
func Parse(r io.Reader) ([]Entry, error) {
	var entries []Entry
	sc := bufio.NewScanner(r)
	// Lines with long SELinux or overlay lowerdir options exceed the default
	// 64 KiB token limit on real nodes.
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		if line == "" {
			continue
		}
		e, err := parseMountInfoLine(line)
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", lineNo, err)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo line %d: %w", lineNo+1, err)
	}
	return entries, nil
}

func parseMountInfoLine(line string) (Entry, error) {
	fields := strings.Split(line, " ")
	// The optional fields (shared:N, master:N, propagate_from:N, unbindable)
	// vary in number, so the separator is found by searching; it cannot be
	// earlier than index 6 and no earlier field can be a bare "-" there.
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 {
		return Entry{}, fmt.Errorf("no \" - \" separator after the sixth field in %q", line)
	}
	post := fields[sep+1:]
	if len(post) < 3 {
		return Entry{}, fmt.Errorf("want fstype, source and super options after \" - \" in %q", line)
	}
	if _, err := strconv.Atoi(fields[0]); err != nil {
		return Entry{}, fmt.Errorf("mount ID: %w", err)
	}
	if _, err := strconv.Atoi(fields[1]); err != nil {
		return Entry{}, fmt.Errorf("parent ID: %w", err)
	}
	if !strings.Contains(fields[2], ":") {
		return Entry{}, fmt.Errorf("major:minor %q has no colon", fields[2])
	}
	return Entry{
		MajorMinor:   fields[2],
		Root:         mountInfoUnescape(fields[3]),
		MountPoint:   mountInfoUnescape(fields[4]),
		Options:      fields[5],
		FSType:       mountInfoUnescape(post[0]),
		Source:       mountInfoUnescape(post[1]),
		SuperOptions: post[2],
	}, nil
}

// mountInfoUnescape undoes the kernel's mangle(): space, tab, newline and
// backslash are written as a backslash and three octal digits. Anything that
// is not such a sequence is kept verbatim so a malformed line cannot lose data.
func mountInfoUnescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && mountInfoIsOctal(s, i+1) {
			v := (s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0')
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountInfoIsOctal reports whether s[i:i+3] is three octal digits forming a byte value
// (at most \377).
func mountInfoIsOctal(s string, i int) bool {
	if i+3 > len(s) {
		return false
	}
	for _, c := range []byte(s[i : i+3]) {
		if c < '0' || c > '7' {
			return false
		}
	}
	return s[i] <= '3'
}

// At returns the last (topmost) entry whose MountPoint is
// filepath.Clean(path). Mounts stacked on one path appear in mount order, so
// the last one is the one a lookup of path actually reaches.
func At(entries []Entry, path string) (Entry, bool) {
	path = filepath.Clean(path)
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].MountPoint == path {
			return entries[i], true
		}
	}
	return Entry{}, false
}

// mountCursorKernel says whether the kernel (5.8 and later) reads the mount table with a cursor:
// a read while mounts change then returns every mount that existed throughout exactly once.
var mountCursorKernel = sync.OnceValue(func() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 5 || major == 5 && minor >= 8
})
