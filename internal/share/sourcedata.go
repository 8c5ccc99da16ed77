package share

import "time"

// SourceData is a source object's files, as a share exposes them. It is shared between callers
// and never modified.
type SourceData struct {
	Files           map[string][]byte
	ResourceVersion string
	UID             string // which object: a deleted and re-created one has another
	// Created is the object's metadata.creationTimestamp: whether a share's first pin may take
	// it (pin.go).
	Created time.Time
	Size    int64
	// Missing are the keys the share lists that the source lacks (sorted): a share in that state
	// cannot be mounted, and its volumes are not refreshed.
	Missing []string
}
