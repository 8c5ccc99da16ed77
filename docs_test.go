package main

// Specification of the documentation's tables that the code and the chart define: they list
// exactly what exists. Files only: a unit test, no cluster, no root, no tool binary.

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

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

// referenceDoc holds the values and flags tables.
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

// The flags table has one row per flag the driver defines (newFlagSet, the command line the
// driver parses), and no row for a flag it does not; a flag whose default is not empty (nor
// taken from the environment, nor a switch) shows that default.
func TestFlagsTableMatchesTheDriversFlags(t *testing.T) {
	table := docTable(t, referenceDoc, "<!-- flags table -->")
	defaults := map[string]string{}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| *([^|]*?) *\\|").FindAllStringSubmatch(table, -1) {
		documented = append(documented, m[1])
		defaults[m[1]] = strings.ReplaceAll(m[2], "`", "")
	}
	sort.Strings(documented)
	fs, _ := newFlagSet(&options{})
	var defined []string
	fs.VisitAll(func(f *flag.Flag) {
		defined = append(defined, f.Name)
		cell, ok := defaults[f.Name]
		if !ok || f.DefValue == "" || f.DefValue == "false" {
			return
		}
		if strings.Contains(cell, f.DefValue) {
			return
		}
		if want, err := time.ParseDuration(f.DefValue); err == nil {
			if got, err := time.ParseDuration(strings.TrimSpace(cell)); err == nil && got == want {
				return
			}
		}
		t.Errorf("%s flags table: --%s's default is %q, the driver's %q", referenceDoc, f.Name, cell, f.DefValue)
	})
	sort.Strings(defined)
	if !slices.Equal(documented, defined) {
		t.Errorf("%s flags table rows %q\nwant (the driver's flags) %q", referenceDoc, documented, defined)
	}
}
