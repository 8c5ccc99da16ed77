// Command mkimage writes a single-layer container image as a docker-archive tar (the format of
// `docker save`: manifest.json + <config>.json + <layer>/layer.tar), which
// `ctr -n k8s.io images import` loads without any registry. Standard library only, so it
// builds in a second.
//
//	mkimage -o out.tar -tag docker.io/library/NAME:TAG -entrypoint /bin/app \
//	    -file ./app:/bin/app[:0755] -symlink /bin/sh:busybox -dir /tmp:1777 -env K=V
//
// The output is deterministic: every timestamp is fixed and entries are sorted, so the same
// inputs always give the same image ID.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// entry is one item of the image's file system.
type entry struct {
	name     string // clean, relative ("bin/sh")
	typ      byte   // tar.TypeReg, tar.TypeDir, tar.TypeSymlink
	mode     int64
	data     []byte
	linkname string
}

// epoch is the timestamp of every file and of the image; fixed for reproducible image IDs.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func main() {
	var (
		out, tag, workdir, user string
		files, links, dirs      listFlag
		entrypoint, cmd, env    listFlag
	)
	flag.StringVar(&out, "o", "", "output docker-archive tar (required)")
	flag.StringVar(&tag, "tag", "", "image reference, e.g. docker.io/library/busybox:local (required)")
	flag.Var(&entrypoint, "entrypoint", "entrypoint argv element (repeatable, in order)")
	flag.Var(&cmd, "cmd", "cmd argv element (repeatable, in order)")
	flag.Var(&env, "env", "KEY=VALUE environment variable (repeatable)")
	flag.Var(&files, "file", "hostpath:imagepath[:octal mode] (repeatable); mode defaults to the host file's")
	flag.Var(&links, "symlink", "linkpath:target (repeatable), e.g. /bin/sh:busybox")
	flag.Var(&dirs, "dir", "imagepath[:octal mode] empty directory (repeatable), e.g. /tmp:1777")
	flag.StringVar(&workdir, "workdir", "/", "working directory")
	flag.StringVar(&user, "user", "", "user (default: root)")
	flag.Parse()
	if out == "" || tag == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(out, tag, workdir, user, files, links, dirs, entrypoint, cmd, env); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(out, tag, workdir, user string, files, links, dirs, entrypoint, cmd, env []string) error {
	entries := map[string]*entry{}
	add := func(e *entry) error {
		if old, ok := entries[e.name]; ok && (old.typ != tar.TypeDir || e.typ != tar.TypeDir) {
			return fmt.Errorf("duplicate path /%s", e.name)
		}
		entries[e.name] = e
		return nil
	}

	for _, f := range files {
		parts := strings.Split(f, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return fmt.Errorf("-file %q: want hostpath:imagepath[:mode]", f)
		}
		name, err := clean(parts[1])
		if err != nil {
			return err
		}
		data, err := os.ReadFile(parts[0])
		if err != nil {
			return err
		}
		st, err := os.Stat(parts[0])
		if err != nil {
			return err
		}
		mode := int64(st.Mode().Perm())
		if len(parts) == 3 {
			if mode, err = parseMode(parts[2]); err != nil {
				return fmt.Errorf("-file %q: %v", f, err)
			}
		}
		if err := add(&entry{name: name, typ: tar.TypeReg, mode: mode, data: data}); err != nil {
			return err
		}
	}
	for _, l := range links {
		link, target, ok := strings.Cut(l, ":")
		if !ok || target == "" {
			return fmt.Errorf("-symlink %q: want linkpath:target", l)
		}
		name, err := clean(link)
		if err != nil {
			return err
		}
		if err := add(&entry{name: name, typ: tar.TypeSymlink, mode: 0o777, linkname: target}); err != nil {
			return err
		}
	}
	for _, d := range dirs {
		p, m, hasMode := strings.Cut(d, ":")
		name, err := clean(p)
		if err != nil {
			return err
		}
		mode := int64(0o755)
		if hasMode {
			if mode, err = parseMode(m); err != nil {
				return fmt.Errorf("-dir %q: %v", d, err)
			}
		}
		if err := add(&entry{name: name, typ: tar.TypeDir, mode: mode}); err != nil {
			return err
		}
	}
	// Every parent directory must exist in the layer, or the runtime's snapshotter creates it
	// with surprising modes (or the unpack fails).
	for name := range entries {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := entries[dir]; !ok {
				entries[dir] = &entry{name: dir, typ: tar.TypeDir, mode: 0o755}
			}
		}
	}

	layer, err := writeLayer(entries)
	if err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer)
	layerID := hex.EncodeToString(layerSum[:])

	if len(env) == 0 {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cfg := map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": nilIfEmpty(entrypoint),
			"Cmd":        nilIfEmpty(cmd),
			"Env":        env,
			"WorkingDir": workdir,
			"User":       user,
		},
		"rootfs": map[string]any{
			"type":     "layers",
			"diff_ids": []string{"sha256:" + layerID},
		},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "mkimage"}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	layerName := layerID + "/layer.tar"

	manifest, err := json.Marshal([]map[string]any{{
		"Config":   cfgName,
		"RepoTags": []string{tag},
		"Layers":   []string{layerName},
	}})
	if err != nil {
		return err
	}

	// Outer archive: written to a temp file and renamed, so a failed run leaves no half tar.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".mkimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{layerID + "/", nil},
		{layerName, layer},
		{cfgName, cfgJSON},
		{"manifest.json", manifest},
	} {
		hdr := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if strings.HasSuffix(f.name, "/") {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

// writeLayer returns the layer tar: entries sorted by path so parents precede children.
func writeLayer(entries map[string]*entry) ([]byte, error) {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Mode: e.mode, ModTime: epoch,
			Uname: "root", Gname: "root", Format: tar.FormatPAX,
		}
		switch e.typ {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeSymlink:
			hdr.Linkname = e.linkname
		case tar.TypeReg:
			hdr.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// clean turns an absolute image path into the relative form used inside the layer.
func clean(p string) (string, error) {
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	if c == "" || c == "." {
		return "", fmt.Errorf("invalid image path %q", p)
	}
	return c, nil
}

// parseMode parses an octal mode, keeping permission plus setuid/setgid/sticky bits.
func parseMode(s string) (int64, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("bad octal mode %q", s)
	}
	return int64(m), nil
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
