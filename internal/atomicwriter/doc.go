// Package atomicwriter publishes a set of files into a directory so that readers see either the
// whole previous set or the whole new one, never a mix and never a partly written file. The
// layout is the one the kubelet's AtomicWriter gives Secret and ConfigMap volumes, extended to
// nested paths, a mode per file, group ownership (fsGroup) and hard links from a directory the
// writer filled earlier. Nothing here knows about Kubernetes objects: callers hand in relative
// paths, bytes and modes.
//
// # Layout
//
//	dir/..2026_11_21_10_20_30.1234567/certs/ca.pem   the files, in a payload dir named after its time
//	dir/..data -> ..2026_11_21_10_20_30.1234567      the link readers go through
//	dir/certs -> ..data/certs                         one link per first path segment
//	dir/ca.crt -> ..data/ca.crt
//
// Names starting with ".." belong to the writer; ValidateKey and ValidatePath refuse them in a
// payload. Replacing ..data with one rename(2) is what changes the whole set at once: a reader
// that resolves ..data once sees one complete set, and a file opened through a top-level link is
// always complete. Links are relative, so they resolve the same inside a pod's bind mount as on
// the host.
//
// # Contract of Writer.Write
//
//   - Afterwards dir holds exactly the files given: their paths, bytes and modes, and with a
//     GID >= 0 every file and dir of the payload owned by 0:GID. An empty (or nil) set is valid
//     and means "revoked": ..data points at an empty payload dir and no top-level link remains.
//   - A payload that is invalid, or that needs a top-level name held by an entry the writer did
//     not make, is refused before anything is written: dir is left unchanged (and not even
//     created). Errors name the offending path, key or gid, never file data.
//   - A failure before the swap (ENOSPC on a full tmpfs, say) removes the new payload dir again,
//     so dir still shows the old complete set; errors wrap the errno, so errors.Is(err,
//     unix.ENOSPC) works. A failure after the swap leaves the new set published, perhaps with
//     top-level links missing or stale; the next Write repairs them.
//   - A payload identical to the current one (paths, bytes, modes, ownership) is not published
//     again, so periodic resyncs neither churn inodes nor wake inotify watchers; only the
//     top-level links are repaired. Unless a file of it has an origin it could be linked from
//     (Writer.Origins) and is another inode: then the same bytes are published again (a new
//     payload dir and ..data, which wakes watchers once), linked, so that they are held once.
//   - Only entries the writer makes are ever removed: payload dirs, ..data_tmp, and links whose
//     target is exactly "..data/<their own name>". Everything goes through an os.Root on dir, so
//     nothing outside dir is followed or touched even if entries inside it were tampered with.
//   - Writes to one dir must be serialized by the caller (they share ..data_tmp); readers need no
//     lock.
//
// # Steps of Writer.Write
//
// The code marks each step with its number.
//
//  1. Validate the payload without looking at the disk: every path (ValidatePath), every mode
//     (permission bits only), the gid, and that no path is both a file and the dir of another.
//  2. Create dir if it is missing (mode 0755), refuse one that is not a directory, and open an
//     os.Root on it; every later step goes through that root. A dir this write created is
//     empty: steps 3 to 5 and the cleanup of step 9 have nothing to find in it and are skipped.
//  3. Find the current payload dir by reading ..data. A ..data that does not name a payload dir
//     is refused: following it could lead anywhere.
//  4. Check that each first path segment is free at the top of dir or already the writer's link.
//  5. If the current payload dir holds exactly the payload, and each of its files that has an
//     origin to be linked from (Writer.Origins) is that origin's file, go to step 8.
//  6. Fill a new payload dir: dirs with mode 0755, each file created exclusively and given its
//     ownership and exact mode before its data is written, or hard-linked from its origin
//     (Writer.Origins) when that file already is what would be written.
//  7. Point ..data_tmp at the new payload dir and rename it over ..data: the commit point. If
//     step 6 or 7 fails, ..data_tmp and the new payload dir are removed and ..data is unchanged.
//     In a dir this write created there is no ..data to replace: ..data is made pointing at the
//     new payload dir, in one symlink(2), as atomic for a reader as the rename.
//  8. Make the top level match the payload: a link for each first segment, none of the writer's
//     links for names no longer in it, no leftover ..data_tmp.
//  9. Remove every payload dir but the current one: the previous one (unless Writer.KeepPrevious
//     keeps it until the next write), and any an interrupted write left behind. This comes
//     last, when no top-level link leads into them any more.
//
// ReadFiles reads the current set back the same way a reader sees it.
package atomicwriter
