package atomicwriter

// Specifies what readers see while Write swaps sets under them: through one resolution of
// ..data, exactly one complete set; through ReadFiles, the same or ErrChanging; through the
// top-level links, complete files only, and the links of names every set has never missing.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// generationData is the content of path key in generation i, of set "A" or "B". The header
// lets a reader tell which write a file came from; the padding and trailer make a truncated or
// partly written file detectable.
func generationData(set string, i int, key string) []byte {
	head := fmt.Sprintf("%s-%d-%s|", set, i, key)
	return []byte(head + strings.Repeat(set, 16<<10) + "|END")
}

// parseGenerationData checks that data is the complete content of key in some generation and
// returns that generation as "set-i".
func parseGenerationData(key string, data []byte) (string, error) {
	head, _, ok := strings.Cut(string(data), "|")
	if !ok {
		return "", fmt.Errorf("key %s: no header in %d bytes", key, len(data))
	}
	parts := strings.SplitN(head, "-", 3)
	if len(parts) != 3 || parts[2] != key {
		return "", fmt.Errorf("key %s: bad header %q", key, head)
	}
	var i int
	if _, err := fmt.Sscanf(parts[1], "%d", &i); err != nil {
		return "", fmt.Errorf("key %s: bad header %q", key, head)
	}
	if !bytes.Equal(data, generationData(parts[0], i, key)) {
		return "", fmt.Errorf("key %s: incomplete or corrupt content (%d bytes, header %q)", key, len(data), head)
	}
	return parts[0] + "-" + parts[1], nil
}

// generationPaths are the two path sets the writes alternate between: a file renamed
// (certs/tls.crt -> certs/renamed.crt), one moved between dirs (certs/tls.key -> moved/tls.key),
// a subdir removed (deep/a/b), and one file in both.
var generationPaths = map[string][]string{
	"A": {"ca.crt", "certs/tls.crt", "certs/tls.key", "deep/a/b/token"},
	"B": {"ca.crt", "certs/renamed.crt", "moved/tls.key", "deep/a/token"},
}

// generation is the payload of write i: set A (mode 0644) for even i, set B (mode 0440) for
// odd i.
func generation(i int) map[string]File {
	set, mode := "A", os.FileMode(0o644)
	if i%2 == 1 {
		set, mode = "B", 0o440
	}
	m := map[string]File{}
	for _, p := range generationPaths[set] {
		m[p] = File{Data: generationData(set, i, p), Mode: mode}
	}
	return m
}

// checkOneGeneration checks that got (path -> bytes) is complete and exactly one
// generation: one "set-i" header across all files, and precisely that set's paths.
func checkOneGeneration(got map[string][]byte) error {
	gens := map[string]bool{}
	for p, data := range got {
		gen, err := parseGenerationData(p, data)
		if err != nil {
			return err
		}
		gens[gen] = true
	}
	if len(gens) != 1 {
		return fmt.Errorf("a mix of generations %v", slices.Sorted(maps.Keys(gens)))
	}
	for gen := range gens {
		set := gen[:1]
		if want := slices.Sorted(slices.Values(generationPaths[set])); !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
			return fmt.Errorf("generation %s has paths %q, want exactly %q", gen, slices.Sorted(maps.Keys(got)), want)
		}
	}
	return nil
}

func TestReadersNeverSeeAMix(t *testing.T) {
	dir := t.TempDir()
	first := generation(0)
	if err := (Writer{Dir: dir, GID: -1}).Write(first); err != nil {
		t.Fatal(err)
	}
	var (
		done                  = make(chan struct{})
		wg                    sync.WaitGroup
		failed                atomic.Bool
		walks, walksTorn      atomic.Int64
		libReads, libTorn     atomic.Int64
		linkReads, linkMisses atomic.Int64
		seenMu                sync.Mutex
		seen                  = map[string]bool{}
	)
	fail := func(format string, args ...any) {
		if failed.CompareAndSwap(false, true) {
			t.Errorf(format, args...)
		}
	}
	stopped := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	// Reader 1, independent of the code under test: resolve ..data once, then walk the whole
	// tree below that dir. If ..data still points at that dir after the walk, the dir was live
	// all along and the walk must have seen exactly one generation with exactly its paths.
	// Otherwise the writer may have been removing the dir under the walk (an error, or a
	// subdir found already empty): that pass is discarded, as a careful reader does.
	wg.Go(func() {
		for !stopped() {
			ts, err := os.Readlink(filepath.Join(dir, "..data"))
			if err != nil {
				fail("..data unreadable during swaps: %v", err)
				return
			}
			got, err := func() (map[string][]byte, error) {
				r, err := os.OpenRoot(filepath.Join(dir, ts))
				if err != nil {
					return nil, err
				}
				defer r.Close()
				got := map[string][]byte{}
				err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
					if err != nil || !d.Type().IsRegular() {
						return err
					}
					got[p], err = r.ReadFile(p)
					return err
				})
				return got, err
			}()
			now, lerr := os.Readlink(filepath.Join(dir, "..data"))
			if lerr != nil {
				fail("..data unreadable during swaps: %v", lerr)
				return
			}
			if now != ts {
				walksTorn.Add(1)
				continue
			}
			if err != nil {
				fail("walk of the live payload dir %s: %v", ts, err)
				return
			}
			if err := checkOneGeneration(got); err != nil {
				fail("one resolution of ..data: %v", err)
				return
			}
			walks.Add(1)
			for p := range got {
				seenMu.Lock()
				seen[string(got[p][:1])] = true
				seenMu.Unlock()
			}
		}
	})
	// Reader 2: ReadFiles makes the same promise by itself; its only allowed failure
	// is giving up after ..data changed during each of its attempts.
	wg.Go(func() {
		for !stopped() {
			vf, err := ReadFiles(dir)
			if errors.Is(err, ErrChanging) {
				libTorn.Add(1)
				continue
			}
			if err != nil {
				fail("ReadFiles during swaps: %v", err)
				return
			}
			got := map[string][]byte{}
			for p, f := range vf {
				got[p] = f.Data
				if want := map[byte]os.FileMode{'A': 0o644, 'B': 0o440}[f.Data[0]]; f.Mode != want {
					fail("ReadFiles: %s has mode %v, want %v", p, f.Mode, want)
					return
				}
			}
			if err := checkOneGeneration(got); err != nil {
				fail("ReadFiles: %v", err)
				return
			}
			libReads.Add(1)
		}
	})
	// Reader 3: every path of both layouts through the top-level links, as a pod reads them.
	// A path may be absent (it is not in the current layout), but a file read is always
	// complete and is the file of that path; the links of first segments that every layout
	// has never disappear.
	wg.Go(func() {
		all := slices.Compact(slices.Sorted(slices.Values(slices.Concat(generationPaths["A"], generationPaths["B"]))))
		for !stopped() {
			for _, p := range all {
				data, err := os.ReadFile(filepath.Join(dir, p))
				if errors.Is(err, fs.ErrNotExist) {
					linkMisses.Add(1)
					continue
				}
				if err != nil {
					fail("read %s: %v", p, err)
					return
				}
				if _, err := parseGenerationData(p, data); err != nil {
					fail("via top-level link: %v", err)
					return
				}
				linkReads.Add(1)
			}
			for _, top := range []string{"ca.crt", "certs", "deep"} {
				if _, err := os.Lstat(filepath.Join(dir, top)); err != nil {
					fail("top-level link %s, in every layout, vanished during swaps: %v", top, err)
					return
				}
			}
		}
	})

	const swaps = 200
	var last map[string]File
	for i := 1; i <= swaps && !failed.Load(); i++ {
		last = generation(i)
		if err := (Writer{Dir: dir, GID: -1}).Write(last); err != nil {
			fail("write %d: %v", i, err)
		}
	}
	close(done)
	wg.Wait()

	t.Logf("%d swaps; ..data walks: %d complete, %d discarded; ReadFiles: %d ok, %d gave up; link reads: %d ok, %d absent",
		swaps, walks.Load(), walksTorn.Load(), libReads.Load(), libTorn.Load(), linkReads.Load(), linkMisses.Load())
	if failed.Load() {
		return
	}
	if walks.Load() == 0 || libReads.Load() == 0 || linkReads.Load() == 0 {
		t.Fatal("a reader made no progress; the test proved nothing")
	}
	checkLayout(t, dir, last, -1)
	seenMu.Lock()
	defer seenMu.Unlock()
	if !seen["A"] || !seen["B"] {
		t.Logf("note: the ..data walker only saw sets %v", slices.Sorted(maps.Keys(seen)))
	}
}
