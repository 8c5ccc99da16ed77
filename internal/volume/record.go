package volume

// A volume's record: what the driver remembers of a published volume, and of each of its shares
// the state the pod was told. Records hold names, never data. Records persist across driver
// upgrades: their JSON names never change, and a field added later must be optional (omitempty,
// zero when absent). A field replaced by another is still read (a share's flags, now its Told),
// and what a driver rolled back needs to show the pod what it saw is still written (revoked:
// shareStateJSON). The root's testdata/record-format.json is the format, byte for byte
// (recordformat_test.go).

import (
	"encoding/json"
	"os"
	"strings"

	"github.com/shared-resource/csi-driver/internal/share"
)

// Record is what the driver must remember about a published volume.
type Record struct {
	VolumeID       string       `json:"volumeID"`
	Shares         []ShareState `json:"shares"`
	Refresh        bool         `json:"refresh"`
	PodNamespace   string       `json:"podNamespace"`
	PodName        string       `json:"podName"`
	PodUID         string       `json:"podUID"`
	ServiceAccount string       `json:"serviceAccount"`
	TargetPath     string       `json:"targetPath"`
	// CreatedTarget says the driver made the target directory, so unpublish may remove it.
	CreatedTarget bool `json:"createdTarget"`
	// How files are made: modes, key selection, owner group (the pod's fsGroup, -1 for none),
	// and the tmpfs's SELinux context mount option.
	DefaultMode  os.FileMode `json:"defaultMode"`
	Items        []Item      `json:"items,omitempty"`
	GID          int         `json:"gid"`
	MountContext string      `json:"mountContext,omitempty"`
	// KeptBytes is what the view a refresh kept for readers still on it costs in memory
	// (Dir.RebuildView), counted in the budget until the next change drops it.
	KeptBytes int64 `json:"keptBytes,omitempty"`
}

// ShareState is what the volume shows of one of its shares.
type ShareState struct {
	share.Ref
	// The source object whose files the share contributes, and its resourceVersion.
	SourceNamespace string `json:"sourceNamespace"`
	SourceName      string `json:"sourceName"`
	ResourceVersion string `json:"resourceVersion"`
	// Told is what the pod was last told of the share, and with it whether the pod sees the
	// share's files (Told.Hidden). Absent: the current files, nothing outstanding.
	Told Told `json:"told,omitempty"`
	// ShareUID is the share object the volume was published from, and SourceUID the source object
	// its files come from: another object under the share's name does not
	// feed the volume. Absent in records written before they were kept: adopted at the next
	// reconcile.
	ShareUID  string `json:"shareUID,omitempty"`
	SourceUID string `json:"sourceUID,omitempty"`
	// Bytes is what the share's copy costs in memory (ChargedBytes), counted in the budget.
	Bytes int64 `json:"bytes,omitempty"`
	// Entries is how many files and directories the share's copy holds (PathEntries), counted
	// against the driver's bound on a volume's entries. Absent (records written before it): not counted.
	Entries int `json:"entries,omitempty"`
	// Exposed is the share's list of keys (spec.items) the files were made through; absent: every
	// key (as in records written before shares had lists). A list change is applied when it
	// differs from the share's.
	Exposed share.Exposure `json:"exposed,omitempty"`
}

// Told is the state of a share of a volume: what the pod was last told of it, and with it
// whether the pod sees the share's files. The states, and what moves a share from one to
// another, are the driver's (its relist's table of verdicts). Its value is what records hold.
type Told string

// The states a share can be in; the driver's table of verdicts says what each one means.
const (
	ToldCurrent                 Told = ""
	ToldReadForbidden           Told = "readForbidden"
	ToldSourceReplaced          Told = "sourceReplaced"
	ToldOverBudget              Told = "overBudget"
	ToldRevoked                 Told = "revoked"
	ToldShareReplaced           Told = "shareReplaced"
	ToldRegrantedReadForbidden  Told = "regrantedReadForbidden"
	ToldRegrantedSourceReplaced Told = "regrantedSourceReplaced"
	ToldRegrantedOverBudget     Told = "regrantedOverBudget"
)

// Known says whether t is one of the states above.
func (t Told) Known() bool {
	switch t {
	case ToldCurrent, ToldReadForbidden, ToldSourceReplaced, ToldOverBudget, ToldRevoked, ToldShareReplaced,
		ToldRegrantedReadForbidden, ToldRegrantedSourceReplaced, ToldRegrantedOverBudget:
		return true
	}
	return false
}

// Hidden says whether the share's files are away from the pod's view in state t.
func (t Told) Hidden() bool {
	switch t {
	case ToldRevoked, ToldShareReplaced, ToldRegrantedReadForbidden, ToldRegrantedSourceReplaced, ToldRegrantedOverBudget:
		return true
	}
	return false
}

// shareStateFields is ShareState without its JSON methods.
type shareStateFields ShareState

// shareStateJSON is a share's state as records hold it: its fields, and the flags each of which
// said what the pod was told before Told did. A record written before Told was kept has only
// the flags (told from the flags: toldFromFlags). Revoked is still written: a driver rolled back
// to a release that knows only the flags reads from it whether the pod sees the share's files,
// which is what matters. The other flags are not: such a driver, not knowing the share was
// already reported unreadable, replaced or over budget, tells the pod once more, and that is all.
type shareStateJSON struct {
	shareStateFields
	Revoked        bool `json:"revoked"`
	ReadForbidden  bool `json:"readForbidden,omitempty"`
	OverBudget     bool `json:"overBudget,omitempty"`
	SourceReplaced bool `json:"sourceReplaced,omitempty"`
	ShareReplaced  bool `json:"shareReplaced,omitempty"`
}

// MarshalJSON writes a share's state as records hold it (shareStateJSON).
func (s ShareState) MarshalJSON() ([]byte, error) {
	return json.Marshal(shareStateJSON{shareStateFields: shareStateFields(s), Revoked: s.Told.Hidden()})
}

// UnmarshalJSON reads a share's state. A record without Told (current, or written before Told
// was kept, or by a driver rolled back to that release since) is read from the flags, and so is
// a Told this driver does not know (a newer driver's).
func (s *ShareState) UnmarshalJSON(b []byte) error {
	var j shareStateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = ShareState(j.shareStateFields)
	// A record that says revoked is read as keeping the files away whatever else it says: no
	// combination of fields shows a pod files the flags hid.
	if s.Told == ToldCurrent || !s.Told.Known() || j.Revoked && !s.Told.Hidden() {
		s.Told = toldFromFlags(j)
	}
	return nil
}

// toldFromFlags is what the pod was told of a share, from the flags a record written before
// Told was kept says. Revoked with one of the others: access came back to a revoked share whose
// files that other reason keeps away (or, for overBudget and sourceReplaced, the reason was
// told before the revocation, and the flags kept it; the next verdict puts the state right, as
// the flags would have, untold). Where several reasons are set, the one most likely told last is
// chosen; choosing another costs at most the pod being told once more, never a message it
// misses (a state is told whenever a verdict leads to it from another).
func toldFromFlags(j shareStateJSON) Told {
	switch {
	case j.Revoked && j.ShareReplaced:
		return ToldShareReplaced
	case j.Revoked && j.ReadForbidden:
		return ToldRegrantedReadForbidden
	case j.Revoked && j.SourceReplaced:
		return ToldRegrantedSourceReplaced
	case j.Revoked && j.OverBudget:
		return ToldRegrantedOverBudget
	case j.Revoked:
		return ToldRevoked
	case j.ReadForbidden:
		// Set with overBudget or sourceReplaced, it was told last: those are judged only from a
		// source the driver read, after which readForbidden is cleared.
		return ToldReadForbidden
	case j.OverBudget:
		return ToldOverBudget
	case j.SourceReplaced:
		return ToldSourceReplaced
	}
	return ToldCurrent
}

// Refs is the volume's shares, in its order.
func (r *Record) Refs() []share.Ref {
	out := make([]share.Ref, len(r.Shares))
	for i, s := range r.Shares {
		out[i] = s.Ref
	}
	return out
}

// Shown is, for each of the volume's shares, whether the pod sees its files.
func (r *Record) Shown() []bool {
	out := make([]bool, len(r.Shares))
	for i, s := range r.Shares {
		out[i] = !s.Told.Hidden()
	}
	return out
}

// Describe names the volume's shares for logs and messages.
func (r *Record) Describe() string {
	names := make([]string, len(r.Shares))
	for i, s := range r.Shares {
		names[i] = s.String()
	}
	return strings.Join(names, ",")
}

// Item selects one key of one share's source and names the file it becomes.
type Item struct {
	Share int         `json:"share,omitempty"` // index into the volume's shares
	Key   string      `json:"key"`
	Path  string      `json:"path"`
	Mode  os.FileMode `json:"mode,omitempty"` // 0: the volume's default mode
}
