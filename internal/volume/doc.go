// Package volume is a volume's storage on the node: its directory, the copies of its shares and
// the pod's view of them, its record (Record) and the store of every volume's record (Store),
// what its tmpfs holds, what it costs the node's memory (RecordedBytes, and a reconcile's account
// until its record is saved: Rewrite), the node's budget that charges every volume (Budget), the
// budget's default from the container's memory limit (DefaultBudget) and the Go runtime's memory
// limit that follows what the volumes hold (LimitRuntimeMemory). The driver decides what a pod
// should see; this package carries it out on disk and keeps the account of what it holds.
//
// A volume's directory (Dir) is the tmpfs mounted at <state dir>/volumes/<volume id>:
//
//	record.json   the volume's record (RecordFile): names and flags, never data; Dir.WriteRecord
//	              replaces it whole, through .record.json.tmp beside it
//	shares/<i>/   share i's copy: its files as last fetched, out of the pod's view (CopyPath)
//	data/         the pod's view, bound read-only onto the target (ViewPath)
//
// A share's copy is what it shows while it is granted, and what comes back after a revocation.
// The view is composed from the copies of the shares the pod may see (ComposeView: the first
// share listed wins a path), and its files are hard links to the copies' files, so a volume's
// bytes are held in memory once. Dir is the only code that writes the copies and the only code
// that builds the view: a publish builds it from the copies it has just written (Populate), a
// reconcile rebuilds it from the copies on disk (RebuildView), through the same writer.
//
// After a refresh, data/ keeps the view it replaced until the volume's next change: an app that
// resolved data/..data just before the swap and opens the files one after another still finds
// each of them (removed at once, a file could be missing for an instant). A change that takes
// files away from the pod (a revocation, keys no longer shared) keeps nothing, and every change
// drops the kept view before writing anything (DropPreviousView), so a volume holds at most two
// sets of files.
//
// Every directory is written by internal/atomicwriter, so a reader (or a crash) sees a whole old
// or a whole new set of files. The operations, in the order of their steps:
//
// Populate, on a new, empty tmpfs:
//
//	(1) make shares/
//	(2) write each share's copy, shares/<i>, in the volume's order
//	(3) write the view, data/, each file a hard link to the copy it came from
//
// RebuildView, on a volume whose copies a reconcile has written:
//
//	(1) read the copy of each share shown; a share not shown contributes nothing
//	(2) compose the view from them; the paths two shares both provide are reported
//	(3) keep the view it replaces only if asked to and it shows no file the new one lacks
//	(4) swap the new view in, in one step (the writer's ..data rename)
//	(5) say whether a view was kept: one was only if the swap changed ..data
//
// Commit, the store's one call for a reconcile's disk work, on a volume whose copies the
// reconcile has written (WriteCopy):
//
//	(1) rebuild the view from the copies (RebuildView), unless nothing the pod sees changed and
//	    the view is the one the saved record describes (ViewChange says which)
//	(2) note what a view kept for readers costs in the record to save (KeptBytes)
//	(3) save the record, last: a crash before leaves the old record, and a view the next
//	    reconcile rebuilds (the store marks a recovered volume's view unverified until then)
//
// A failure at (1) or (3) leaves the volume charged what its tmpfs holds, measured, and its view
// marked as one the record may not describe, until a reconcile rebuilds it.
//
// The contract: a Budget and a Store are safe for concurrent use; a Reservation and a Rewrite
// belong to one operation. A Dir is not safe for concurrent use on the same volume: its caller
// serializes every write to one volume (the driver's per-volume lock), and calls Measure,
// CountUnlinked, the Store's Save, Commit and ChargeUnlinkedFiles with that lock held. The store
// hands out copies of records (Record.Clone): a record changes only by a save, once the disk has.
// A record's JSON is a format kept across versions (record.go; the root's testdata/record-format.json
// pins it byte for byte). Nothing here mounts, unmounts or removes a volume's directory: the caller
// owns the tmpfs. The package knows a share by its kind and name (internal/share) and by its
// position in the volume's order; what the pod was told of it (Told) is a state the driver's
// verdicts move, which this package only stores, and reads for whether the share's files are in
// the view. Its own code knows nothing of the API server; it imports, of the driver's, only
// internal/atomicwriter, internal/share (and through it the share API's names and informers)
// and internal/crashpoint. The root imports it.
package volume
