// Package podcmd is the binary's in-pod commands: `watch` (watch.go, watchchange.go, signal.go),
// a sidecar that tells the application that a share's files changed, and `env-file` (envfile.go),
// an init container that turns a share's files into an env file for the kubelet's fileKeyRef.
//
// The contract, which the package keeps by what it imports (no client-go, nothing of the
// driver's):
//
//   - They read only what the pod itself sees: the share volumes the pod mounts (--dir, through
//     their ..data link, internal/atomicwriter's reader), and, for watch --signal, /proc (the
//     names, users and parents of the processes of the pod's shared process namespace).
//   - They write only what they are told to: env-file its --out file (a temporary file beside
//     it, renamed over it, only in a tmpfs) and removes only its own temporary files there;
//     watch writes nothing, and signals only processes named --process that run as its own
//     user.
//   - They never talk to the API server, need no privilege and no shell, never write into a
//     share's volume, and never print a value of a share's files: messages name keys, paths
//     and rules.
package podcmd

import (
	"context"
	"io"
)

// The subcommands' names: `shared-resource-csi watch ...`, `shared-resource-csi env-file ...`.
const (
	WatchCommand   = watchCommand
	EnvFileCommand = envFileCommand
)

// Watch runs `shared-resource-csi watch args...` until the files change (it returns --exit-code)
// or ctx ends (0), and returns the process's exit code; it writes only to stderr.
func Watch(ctx context.Context, args []string, stderr io.Writer) int {
	return runWatchCommand(ctx, args, stderr)
}

// EnvFile runs `shared-resource-csi env-file args...` and returns the process's exit code: 0
// written, 1 refused, 2 a bad flag; it writes only to stderr (and --out).
func EnvFile(args []string, stderr io.Writer) int {
	return runEnvFileCommand(args, stderr)
}
