package main

// Specification of the documentation's tables that the code and the chart define: they list
// exactly what exists. Files only: a unit test, no cluster, no root, no tool binary.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// chartDir is the Helm chart, the one source of the manifests.
const chartDir = "charts/shared-resource-csi"

// valueKeys lists values.yaml's leaves as dotted paths (a list or an empty map is a leaf).
func valueKeys(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !strings.HasSuffix("."+prefix, ".resources") && prefix != "updateStrategy" {
			for k, vv := range sub {
				walk(strings.TrimPrefix(prefix+"."+k, "."), vv)
			}
			return
		}
		keys = append(keys, prefix)
	}
	walk("", m)
	sort.Strings(keys)
	return keys
}

// docTable is the Markdown table that follows marker (an HTML comment) in file, up to the first
// blank line.
func docTable(t *testing.T, file, marker string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("%s has no %s marker", file, marker)
	}
	table, _, _ = strings.Cut(strings.TrimLeft(table, "\n"), "\n\n")
	return table
}

// referenceDoc holds the values table.
const referenceDoc = "docs/reference.md"

// The values table has one row per value of the chart, and no row for a value that does not exist.
func TestValuesTableMatchesTheChart(t *testing.T) {
	table := docTable(t, referenceDoc, "<!-- values table -->")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z.]+)` \\|").FindAllStringSubmatch(table, -1) {
		documented = append(documented, m[1])
	}
	sort.Strings(documented)
	if want := valueKeys(t); !slices.Equal(documented, want) {
		t.Errorf("%s values table rows %q\nwant (values.yaml) %q", referenceDoc, documented, want)
	}
}
