package mountinfo

// Specification of how the driver reads the mount table: /proc/self/mountinfo parsed field by
// field with its octal escapes, malformed lines refused, and the topmost mount at a path found.
// Needs no root: the tests that mount are the root package's tmpfs_root_test.go.

import (
	"slices"
	"strings"
	"testing"
)

func TestMountInfoParse(t *testing.T) {
	const input = `22 27 0:21 / /proc rw,relatime shared:13 - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
300 27 0:52 /data /var/lib/kubelet/pods/p/volumes/with\040space ro,nosuid,nodev,noexec,relatime shared:1 master:2 - tmpfs tmpfs ro,size=1024k,mode=755
301 27 0:53 / /odd\011tab\012nl\134bs rw - tmpfs my\040src rw
302 27 0:54 / /nooptional rw - fuse.sshfs  rw,user_id=0

`
	got, err := Parse(strings.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{"0:21", "/", "/proc", "rw,relatime", "proc", "proc", "rw"},
		{"254:0", "/", "/", "rw,relatime", "ext4", "/dev/vda", "rw,discard"},
		{"98:0", "/mnt1", "/mnt2", "rw,noatime", "ext3", "/dev/root", "rw,errors=continue"},
		{"0:52", "/data", "/var/lib/kubelet/pods/p/volumes/with space", "ro,nosuid,nodev,noexec,relatime", "tmpfs", "tmpfs", "ro,size=1024k,mode=755"},
		{"0:53", "/", "/odd\ttab\nnl\\bs", "rw", "tmpfs", "my src", "rw"},
		{"0:54", "/", "/nooptional", "rw", "fuse.sshfs", "", "rw,user_id=0"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Parse:\n got %+v\nwant %+v", got, want)
	}

	for _, line := range []string{
		"22 27 0:21 / /proc rw,relatime shared:13 proc proc rw", // no separator
		"22 27 0:21 / /proc - proc proc rw",                     // separator too early
		"x 27 0:21 / /proc rw - proc proc rw",                   // bad ID
		"22 y 0:21 / /proc rw - proc proc rw",                   // bad parent
		"22 27 021 / /proc rw - proc proc rw",                   // bad major:minor
		"22 27 0:21 / /proc rw - proc proc",                     // missing super options
	} {
		if _, err := Parse(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", line)
		}
	}
}

func TestMountInfoUnescapeKeepsMalformed(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:       "plain",
		`a\040b`:      "a b",
		`trail\04`:    `trail\04`,
		`bad\089`:     `bad\089`,
		`big\777`:     `big\777`,
		`\134\134`:    `\\`,
		`end\`:        `end\`,
		`x\0400\0401`: "x 0 1",
	} {
		if got := mountInfoUnescape(in); got != want {
			t.Errorf("mountInfoUnescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountAtTopmost(t *testing.T) {
	entries := []Entry{
		{MajorMinor: "0:1", MountPoint: "/"},
		{MajorMinor: "0:2", MountPoint: "/a/b", Options: "rw"},
		{MajorMinor: "0:3", MountPoint: "/a/b/c"},
		{MajorMinor: "0:4", MountPoint: "/a/b", Options: "ro"},
	}
	e, ok := At(entries, "/a//b/")
	if !ok || e.MajorMinor != "0:4" {
		t.Fatalf("At(/a//b/) = %+v, %v; want the topmost entry, 0:4", e, ok)
	}
	if _, ok := At(entries, "/a"); ok {
		t.Fatal("At(/a) found an entry; /a is not a mount point")
	}
}

func TestMountReadMountInfoSelf(t *testing.T) {
	entries, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := At(entries, "/"); !ok {
		t.Fatal("Read has no entry for /")
	}
}

func FuzzParseMountInfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n")
	f.Add("1 2 0:1 /\\040 /x\\134 rw shared:1 master:2 - tmpfs  rw\n")
	f.Add("1 2 3 4 5 6 - - - -")
	f.Fuzz(func(t *testing.T, s string) {
		entries, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, e := range entries {
			if !strings.Contains(e.MajorMinor, ":") {
				t.Fatalf("accepted entry without major:minor: %+v", e)
			}
		}
	})
}
