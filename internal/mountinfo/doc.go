// Package mountinfo reads the mount table, /proc/self/mountinfo: how the driver recognises its
// own mounts, so that it only ever unmounts what it mounted.
//
// Read parses the table of the calling process (reading it again until two reads agree on kernels
// before 5.8, whose reads can skip or repeat an entry while mounts change); Parse parses any text
// in its format, and At finds the topmost mount at a path.
//
// The contract: it only reads. It never mounts or unmounts, never panics on malformed input (a
// malformed line is an error naming the line), and keeps an escape it cannot decode verbatim. It
// knows nothing of volumes or of Kubernetes, and imports nothing of the driver's. The root imports
// it.
package mountinfo
