package volume

// Composing the view: the shares' files, in the volume's order, into the one directory the pod
// sees.

import (
	"iter"
	"sort"

	"github.com/shared-resource/csi-driver/internal/atomicwriter"
)

// Conflict is one path that two shares both produce: Kept and Dropped are the shares' positions
// in the volume's order.
type Conflict struct {
	Path          string
	Kept, Dropped int
}

// composeFiles merges the shares' files in the volume's order. A path produced by two shares (or
// a file of one that is a directory of another) goes to the earlier share, as in a projected
// volume the first source listed wins; the conflicts are returned so they can be reported.
func composeFiles(perShare []map[string]atomicwriter.File) (map[string]atomicwriter.File, []Conflict) {
	out := map[string]atomicwriter.File{}
	owner := map[string]int{} // path -> share index, including the directories of each file
	var conflicts []Conflict
	for i, files := range perShare {
		if files == nil {
			continue // revoked: contributes nothing
		}
		paths := make([]string, 0, len(files))
		for p := range files {
			paths = append(paths, p)
		}
		sort.Strings(paths)
	next:
		for _, p := range paths {
			// Taken: the path itself (a file or a directory of the earlier share), or any of
			// its parent directories that is a file of an earlier share.
			for q := range pathAndParents(p) {
				if j, taken := owner[q]; taken && j != i && (q == p || isFile(out, q)) {
					conflicts = append(conflicts, Conflict{Path: p, Kept: j, Dropped: i})
					continue next
				}
			}
			out[p] = files[p]
			for q := range pathAndParents(p) {
				owner[q] = i
			}
		}
	}
	return out, conflicts
}

func isFile(files map[string]atomicwriter.File, p string) bool {
	_, ok := files[p]
	return ok
}

// pathAndParents yields p, then its parent directories, nearest first.
func pathAndParents(p string) iter.Seq[string] {
	return func(yield func(string) bool) {
		if yield(p) {
			atomicwriter.ParentDirs(p)(yield)
		}
	}
}
