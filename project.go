package main

// Projection: how a source's keys become a volume's files (the volume's items and modes), the
// same way at publish, at every refresh and on restore, from what the record remembers.

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// missingKeysError says which selected keys the source lacks.
type missingKeysError struct{ keys []string }

func (e *missingKeysError) Error() string {
	return fmt.Sprintf("the source has no key %s selected by the volume's items", strings.Join(e.keys, ", "))
}

// projectFiles selects and names the files of a volume. With no items, every key becomes a file
// of the same name; keys are validated either way before anything is written.
func projectFiles(src map[string][]byte, items []item, defaultMode os.FileMode) (map[string]volumeFile, error) {
	out := map[string]volumeFile{}
	if len(items) == 0 {
		for k, v := range src {
			if err := validateKey(k); err != nil {
				return nil, err
			}
			out[k] = volumeFile{Data: v, Mode: defaultMode}
		}
		return out, nil
	}
	var missing []string
	for _, it := range items {
		v, ok := src[it.Key]
		if !ok {
			missing = append(missing, fmt.Sprintf("%q", it.Key))
			continue
		}
		mode := it.Mode
		if mode == 0 {
			mode = defaultMode
		}
		out[it.Path] = volumeFile{Data: v, Mode: mode}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, &missingKeysError{keys: missing}
	}
	return out, nil
}
