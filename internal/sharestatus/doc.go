// Package sharestatus is the status controller's writer (--role=status): the only writer of the
// shares' status. While its replica holds the status Lease (lease.go: one writer in the cluster
// at a time), it keeps each SharedSecret's and SharedConfigMap's Ready condition current (whether
// its source exists and the driver can read it: ready.go, checked by writer.go), with
// status.exposedKeys, the first pin (status.sourceUID, internal/share/pin.go) and the record that
// an object was read for the share's spec (SourceObserved, observed.go). Run is its one entry
// point; the root's roles.go wires it.
//
// The contract: Run returns only after its context ended and the Lease was released; nothing is
// written after it returns. It reads the shares from a share.Index it is given, checks a source
// by a GET of its metadata (a share without a list) or of the whole object through the getter it
// is given (a share with a list: only which listed keys are missing is kept), never caches,
// logs or writes a source's data, and writes only the shares' status subresource and its one
// Lease. It imports internal/share and internal/sourceaccess, and nothing else of the driver's.
package sharestatus
