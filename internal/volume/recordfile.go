package volume

// The record's file: the volume's record, written whole, through a temporary file beside it, by
// the Store (store.go), which encodes it (record.go); here it is bytes.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// recordPath is the volume's record, inside its tmpfs.
func (vd Dir) recordPath() string { return filepath.Join(vd.Path, RecordFile) }

// WriteRecord replaces the volume's record with data atomically: a crash leaves the old record or
// the new one (writeRecordFile). The caller writes one record of a volume at a time.
func (vd Dir) WriteRecord(data []byte) error { return writeRecordFile(vd.recordPath(), data) }

// writeRecordFile writes a volume's record at path so that a reader (or a crash) sees either the
// old or the new content, never a partial file: the bytes go to a temporary file beside it,
// which rename(2) then puts in its place in one step. There is no fsync: the record is on the
// volume's tmpfs, where fsync does nothing (no backing store; the tmpfs, and the volume, do not
// outlive a reboot) and the rename alone is what makes the write atomic.
//
// The temporary file has one fixed name, not a random one, which is safe only because one save
// at a time writes a given record (WriteRecord's caller holds the volume's lock). It is created
// exclusively, with mode 0600 (a umask can only take bits away; the driver reads it as root): a
// file a crash left under that name is removed first if it is what a save leaves (a regular
// file, with no other link to it); anything else there (a symlink, a hard link, a directory) is
// not the driver's to write through or delete, and the save fails (errRecordTempInTheWay).
func writeRecordFile(path string, data []byte) error {
	tmpName := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	tmp, err := createRecordTemp(tmpName)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// rename(2) itself: os.Rename would first lstat path, to refuse replacing a directory, which
	// a record never is (rename(2) refuses that too).
	if err := renameRetryingEINTR(tmpName, path); err != nil {
		return &os.LinkError{Op: "rename", Old: tmpName, New: path, Err: err}
	}
	ok = true
	return nil
}

// createRecordTemp creates name exclusively, removing first a leftover of an interrupted save.
func createRecordTemp(name string) (*os.File, error) {
	// O_NONBLOCK changes nothing for a regular file and spares package os the fcntl calls it
	// otherwise makes to try the file on its poller (internal/atomicwriter: openNonblock).
	const flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL | unix.O_NOFOLLOW | unix.O_NONBLOCK
	f, err := os.OpenFile(name, flags, 0o600)
	if !errors.Is(err, os.ErrExist) {
		return f, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: name, Err: err}
	}
	if kind := leftoverKind(st); kind != "" {
		return nil, fmt.Errorf("%w: %s is %s; only root on the node can make it there: find out who did, then remove it",
			errRecordTempInTheWay, name, kind)
	}
	klog.InfoS("Removing the temporary file of an interrupted record save", "path", name)
	if err := unix.Unlink(name); err != nil {
		return nil, &os.PathError{Op: "unlink", Path: name, Err: err}
	}
	return os.OpenFile(name, flags, 0o600)
}

// errRecordTempInTheWay: something other than a leftover of an interrupted save has the record's
// temporary file's name.
var errRecordTempInTheWay = errors.New("a file not the driver's is in the way of the volume's record save")

// leftoverKind says what st is when it is not what an interrupted save leaves (a regular file
// with one link), and "" when it is.
func leftoverKind(st unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Nlink != 1 {
			return fmt.Sprintf("a file with %d hard links", st.Nlink)
		}
		return ""
	case unix.S_IFLNK:
		return "a symlink"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("not a regular file (file type %#o)", st.Mode&unix.S_IFMT)
}

// renameRetryingEINTR is rename(2), retried when a signal interrupts it, as os.Rename does.
func renameRetryingEINTR(from, to string) error {
	for {
		if err := unix.Rename(from, to); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
