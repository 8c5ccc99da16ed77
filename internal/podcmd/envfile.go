package podcmd

// `shared-resource-csi env-file`: run as an init container, it turns the files of a share the pod
// mounts into an env file that the kubelet reads for the app's `env[].valueFrom.fileKeyRef`
// (EnvFiles; the file must be in an emptyDir volume, the API server refuses any other type). It
// needs no API access, no privilege and no shell. With the `watch` sidecar and
// RestartAllContainers, an in-place restart runs it again (the volumes are kept), so the app
// starts with the share's new values (docs/telling-the-application.md, "Environment variables").
//
// The format is the one the kubelet's parser (pkg/kubelet/util/env, Kubernetes 1.35 to 1.37)
// reads: one NAME='VALUE' a variable, the value between single quotes taken literally, newlines
// included; there is no escape, so a value holding a single quote cannot be written. The parser
// reads the file line by line with a 64 KiB buffer: a longer line fails the app's start. And
// what the kubelet passes to the runtime and the runtime to execve must survive: no NUL byte, no
// carriage return (the parser drops one before a newline), valid UTF-8 (the runtime's JSON
// would replace invalid bytes silently). A key --key asks for that breaks a rule is refused,
// naming the key and the rule, never the value: a partial or altered environment is worse than an
// app that does not start and says why. Without --key (every key of the share), a key that breaks
// a rule is left out, each named on stderr with the rule, and the others are written: the app
// asks for its variables by name (fileKeyRef), so a key it does not use cannot stop it, and one
// it does use fails its start by name. A file of no variable at all is refused.
//
// The file is written to a temporary file beside it and renamed over it, so the kubelet reads
// the old or the new file, never a mix; and only into a tmpfs (emptyDir medium: Memory), so the
// values never reach the node's disk. Nothing of the values is printed.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

const (
	// envFileCommand is the subcommand's name: `shared-resource-csi env-file ...`.
	envFileCommand = "env-file"
	// envFileMaxLine is the longest line the kubelet's parser reads: bufio.Scanner's default
	// buffer is 64 KiB, the newline included.
	envFileMaxLine = 64<<10 - 1
	// envFileMaxVar is Linux's limit on one NAME=VALUE string handed to execve (MAX_ARG_STRLEN,
	// 32 pages of 4 KiB, its terminating NUL included): a longer one fails the app's start.
	envFileMaxVar = 128<<10 - 1
	// envFileMaxBytes bounds the whole file: execve takes at most a quarter of the stack limit
	// (8 MiB by default) for all arguments and variables together, and the kubelet reads the
	// file once per variable.
	envFileMaxBytes = 1 << 20
)

// envFileOptions are the subcommand's flags.
type envFileOptions struct {
	dir    string
	out    string
	keys   []envKey // nil: every key of the share, each under its own name
	prefix string
}

// envKey is one key of the share to write and the variable's name.
type envKey struct{ key, name string }

type envKeyList []envKey

func (l *envKeyList) String() string { return fmt.Sprint(*l) }
func (l *envKeyList) Set(v string) error {
	key, name, mapped := strings.Cut(v, "=")
	if key == "" || (mapped && name == "") {
		return fmt.Errorf("%q: want KEY or KEY=NAME", v)
	}
	if !mapped {
		name = key
	}
	*l = append(*l, envKey{key: key, name: name})
	return nil
}

func parseEnvFileFlags(args []string, usage io.Writer) (*envFileOptions, error) {
	o := &envFileOptions{}
	var keys envKeyList
	fs := flag.NewFlagSet("shared-resource-csi env-file", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.StringVar(&o.dir, "dir", "", "the share's volumeMounts.mountPath in this container (required)")
	fs.StringVar(&o.out, "out", "", "the env file to write, in an emptyDir volume with medium: Memory (required); the app's fileKeyRef names its path in that volume")
	fs.Var(&keys, "key", "a key of the share to write, KEY (the variable is named KEY) or KEY=NAME; repeat for several. Default: every key, each under its own name")
	fs.StringVar(&o.prefix, "prefix", "", "put this before every variable's name (e.g. DB_)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.keys = keys
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q: env-file takes flags only", fs.Arg(0))
	case o.dir == "":
		return nil, errors.New("--dir is required: the mountPath of the share's volume in this container")
	case o.out == "":
		return nil, errors.New("--out is required: the env file's path in an emptyDir volume (medium: Memory)")
	}
	return o, nil
}

// runEnvFileCommand runs `shared-resource-csi env-file args...` and returns the exit code: 0
// written, 1 refused (the message says why and what to do), 2 a bad flag.
func runEnvFileCommand(args []string, stderr io.Writer) int {
	o, err := parseEnvFileFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "shared-resource-csi env-file: %v\n", err)
		return 2
	}
	link, names, omitted, err := writeEnvFileFromShare(o)
	for _, why := range omitted {
		fmt.Fprintf(stderr, "shared-resource-csi env-file: left out: %s\n", why)
	}
	if err != nil {
		fmt.Fprintf(stderr, "shared-resource-csi env-file: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "shared-resource-csi env-file: wrote %d variable(s) to %s from %s (%s -> %s): %s\n",
		len(names), o.out, o.dir, dataLink, link, strings.Join(names, ", "))
	return 0
}

// writeEnvFileFromShare reads the share's files under o.dir, renders them and writes o.out; it
// returns ..data's target (which version of the files it read), the variables' names, and why
// each key it left out was (renderEnvFile).
func writeEnvFileFromShare(o *envFileOptions) (link string, names, omitted []string, err error) {
	link, err = os.Readlink(filepath.Join(o.dir, dataLink))
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s has no readable %s link (%v): --dir must be the mountPath of the share's csi volume in this container", o.dir, dataLink, err)
	}
	files, err := atomicwriter.ReadFiles(o.dir)
	if err != nil {
		return "", nil, nil, err
	}
	if len(files) == 0 {
		// The revoked share's values leave the env file too, as its files left the volume.
		return "", nil, nil, fmt.Errorf("%s is empty: the pod's service account may no longer use the share, or the share was deleted (see the pod's SharedResourceAccessRevoked event); %s",
			o.dir, emptyEnvFile(o.out))
	}
	data := make(map[string][]byte, len(files))
	for p, f := range files {
		data[p] = f.Data
	}
	body, names, omitted, err := renderEnvFile(data, o.keys, o.prefix)
	if err != nil {
		// A refusal empties the file as well: a key asked for with --key that left the view
		// (one share of several revoked, or the key no longer shared) must not leave its last
		// value in the env file for a container that starts from it anyway.
		return "", nil, omitted, fmt.Errorf("%w; %s", err, emptyEnvFile(o.out))
	}
	if err := writeEnvFileAtomically(o.out, body); err != nil {
		return "", nil, omitted, err
	}
	return link, names, omitted, nil
}

// emptyEnvFile empties the env file at out (where there is one to empty) and says so, or why it
// could not.
func emptyEnvFile(out string) string {
	if _, err := os.Lstat(out); errors.Is(err, os.ErrNotExist) {
		return "no env file was written"
	}
	if err := writeEnvFileAtomically(out, nil); err != nil {
		return fmt.Sprintf("emptying the env file failed: %v", err)
	}
	return "the env file now holds no variable"
}

// renderEnvFile renders the selected keys of files as an env file, each variable named
// prefix+name. With keys, a key that cannot be written is an error. Without (nil: every key,
// sorted, each under its own name), a key that cannot be written is left out, and omitted says
// why, one message a key; it is an error only when no key is left. Its messages name keys and
// rules, never values.
func renderEnvFile(files map[string][]byte, keys []envKey, prefix string) (body []byte, names, omitted []string, err error) {
	every := keys == nil
	if every {
		for k := range files {
			keys = append(keys, envKey{key: k, name: k})
		}
		slices.SortFunc(keys, func(a, b envKey) int { return strings.Compare(a.key, b.key) })
	}
	var b strings.Builder
	seen := map[string]string{} // name -> key
	for _, k := range keys {
		line, err := envFileLine(files, k, prefix, seen)
		if err != nil && every {
			omitted = append(omitted, err.Error())
			continue
		}
		if err != nil {
			return nil, nil, omitted, err
		}
		b.WriteString(line)
		names = append(names, prefix+k.name)
		if b.Len() > envFileMaxBytes {
			return nil, nil, omitted, fmt.Errorf("the variables exceed %d bytes (at key %q): select fewer with --key, and mount large keys as files", envFileMaxBytes, k.key)
		}
	}
	if every && len(names) == 0 && len(omitted) > 0 {
		return nil, nil, omitted, fmt.Errorf("no key of the share can be written to an env file (each is named above, with why): select keys with --key, or mount the share as files")
	}
	return []byte(b.String()), names, omitted, nil
}

// envFileLine is key k's line of the env file (NAME='VALUE' and a newline), or why it cannot be
// written; seen holds the names written before it (name -> key), and gains k's.
func envFileLine(files map[string][]byte, k envKey, prefix string, seen map[string]string) (string, error) {
	value, ok := files[k.key]
	if !ok {
		return "", fmt.Errorf("key %q is not in the share's volume (it has %s): fix --key, or the volume's items", k.key, quoteAll(sortedKeys(files)))
	}
	name := prefix + k.name
	if !validEnvName(name) {
		return "", fmt.Errorf("key %q: %q cannot be a variable's name (letters, digits and _, not starting with a digit): name it with --key=%s=%s, and list with --key every other key to write", k.key, name, flagWord(k.key), suggestEnvName(k.key))
	}
	if other, dup := seen[name]; dup {
		return "", fmt.Errorf("keys %q and %q would both be the variable %s: give one another name with --key=KEY=NAME", other, k.key, name)
	}
	if len(value) == 0 {
		// The kubelet's parser answers "" for a key it does not find, and so takes a key
		// whose value is empty for a missing one: the app would not start.
		return "", fmt.Errorf("key %q is empty, and the kubelet reads an empty value from an env file as a missing key (the app would not start): give it a value, or leave it out (--key for the others)", k.key)
	}
	if err := checkEnvValue(value); err != nil {
		return "", fmt.Errorf("key %q: its value %v, which an env file cannot carry: mount the share as a file for this key and leave it out (--key for the others)", k.key, err)
	}
	line := name + "='" + string(value) + "'\n"
	if n := len(name) + 1 + len(value); n > envFileMaxVar {
		return "", fmt.Errorf("key %q: the variable is %d bytes, over the %d a process's variable may hold: mount it as a file instead", k.key, n, envFileMaxVar)
	}
	for l := range strings.Lines(line) {
		if len(strings.TrimSuffix(l, "\n")) > envFileMaxLine {
			return "", fmt.Errorf("key %q: its value has a line over %d bytes, longer than the kubelet reads from an env file: mount it as a file instead", k.key, envFileMaxLine)
		}
	}
	seen[name] = k.key
	return line, nil
}

// validEnvName is a portable variable name: letters, digits and _, not starting with a digit.
// Kubernetes accepts more, but a name with a dot or a dash cannot be read by a shell and is
// treated differently by programs, so names are kept to what every one of them reads.
func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// flagWord is s as a message's suggested flag shows it: as it is, or, holding a character a
// terminal does not print as itself, Go-quoted, so that it cannot start a line of its own.
func flagWord(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// suggestEnvName turns a key such as tls.crt into TLS_CRT, for the refusal's message.
func suggestEnvName(key string) string {
	b := []byte(strings.ToUpper(key))
	for i, c := range b {
		if c != '_' && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	s := string(b)
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	return s
}

// checkEnvValue says why the format or a process's environment cannot carry v, or nil.
func checkEnvValue(v []byte) error {
	switch {
	case slices.Contains(v, 0):
		return errors.New("holds a NUL byte (binary data)")
	case !utf8.Valid(v):
		return errors.New("is not valid UTF-8 (binary data)")
	case slices.Contains(v, '\''):
		return errors.New("holds a single quote (the format quotes values with ' and has no escape)")
	case slices.Contains(v, '\r'):
		return errors.New("holds a carriage return (the kubelet drops it before a newline)")
	}
	return nil
}

// envFileTempInfix marks the temporary files env-file writes beside its --out, and removes.
const envFileTempInfix = ".env-file-tmp-"

// writeEnvFileAtomically writes body to path by a temporary file in the same directory and a
// rename, after checking that the directory is a tmpfs.
func writeEnvFileAtomically(path string, body []byte) error {
	dir := filepath.Dir(path)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("--out %s: %v: mount an emptyDir volume (medium: Memory) at %s", path, err, dir)
	}
	if st.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("--out %s: %s is not in memory (not a tmpfs): the values would reach the node's disk; give its emptyDir volume medium: Memory", path, dir)
	}
	// A run killed while writing leaves its temporary file; the next run removes it, so that
	// restarts do not fill the emptyDir with copies of old values. Only regular files of the
	// name only this command makes: another file of the emptyDir is not its to delete.
	prefix := "." + filepath.Base(path) + envFileTempInfix
	if stale, err := filepath.Glob(filepath.Join(dir, prefix+"*")); err == nil {
		for _, f := range stale {
			if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
				_ = os.Remove(f)
			}
		}
	}
	tmp, err := os.CreateTemp(dir, prefix+"*")
	if err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing of that name to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(body); err != nil {
		tmp.Close()
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("--out %s: %w", path, err)
	}
	return nil
}

// quoteAll is names, each quoted, comma-separated, for messages.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// sortedKeys is files' paths, sorted.
func sortedKeys(files map[string][]byte) []string {
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
