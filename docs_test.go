package main

// Specification of the documentation's tables that the code and the chart define: they list
// exactly what exists. Files only: a unit test, no cluster, no root, no tool binary.

import (
	"flag"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
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

// referenceDoc holds the flags table; operatingDoc the troubleshooting table; chartReadme the
// values table (Artifact Hub shows the chart's README).
const (
	referenceDoc = "docs/reference.md"
	operatingDoc = "docs/operating.md"
	chartReadme  = chartDir + "/README.md"
)

// valueAt is the value at the dotted path key of values.yaml.
func valueAt(t *testing.T, key string) any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for _, k := range strings.Split(key, ".") {
		v = v.(map[string]any)[k]
	}
	return v
}

// defaultLiteral is how the values table writes a default: YAML's own spelling of a scalar, `""` for
// the empty string, `[]` and `{}` for the empty list and map; ok false for anything else (a list
// or map with content, which the table describes in words).
func defaultLiteral(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		if v == "" {
			return `""`, true
		}
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case []any:
		return "[]", len(v) == 0
	case map[string]any:
		return "{}", len(v) == 0
	}
	return "", false
}

// The chart README's values table has one row per value of the chart, and no row for a value
// that does not exist; a row whose default is one literal in backquotes gives values.yaml's.
func TestValuesTableMatchesTheChart(t *testing.T) {
	table := docTable(t, chartReadme, "<!-- values table -->")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z.]+)` \\| ([^|]*) \\|").FindAllStringSubmatch(table, -1) {
		documented = append(documented, m[1])
		written, ok := strings.CutPrefix(m[2], "`")
		if !ok || !strings.HasSuffix(written, "`") || strings.Contains(strings.TrimSuffix(written, "`"), "`") {
			continue // a default told in words
		}
		written = strings.TrimSuffix(written, "`")
		if want, ok := defaultLiteral(valueAt(t, m[1])); ok && written != want {
			t.Errorf("%s: %s's default is written %q, values.yaml has %q", chartReadme, m[1], written, want)
		}
	}
	sort.Strings(documented)
	if want := valueKeys(t); !slices.Equal(documented, want) {
		t.Errorf("%s values table rows %q\nwant (values.yaml) %q", chartReadme, documented, want)
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

// errorRow is a row of the troubleshooting table: a gRPC code and a phrase of the message.
type errorRow struct{ code, phrase string }

// The troubleshooting table is in step with the errors the driver returns to the kubelet:
//   - each row's phrase is in a string constant of the driver's code, and the row's code is
//     returned with it (see errorSites.codesOf): a row whose message was reworded, or whose
//     error now has another code, fails;
//   - every code the driver returns (status.Error, status.Errorf, invalidf) has a row;
//   - every place that returns a non-Internal code with a message of its own (at least two words
//     besides the verbs) is found by a row of that code whose phrase is in that message: a new
//     error without a row fails. Internal errors (a mount or a write the node refused) share
//     rows that send the reader to the log.
func TestTroubleshootingTableMatchesTheCode(t *testing.T) {
	rows := troubleshootingRows(t)
	if len(rows) < 10 {
		t.Fatalf("%s's errors table has %d rows; the parse must have failed", operatingDoc, len(rows))
	}
	src := loadErrorSites(t)
	tableCodes := map[string]bool{}
	for _, r := range rows {
		tableCodes[r.code] = true
		if !isGRPCCode(r.code) {
			t.Errorf("row %q %q: %q is not a gRPC code", r.code, r.phrase, r.code)
			continue
		}
		returned, found := src.codesOf(r.phrase)
		switch {
		case !found:
			t.Errorf("row %q %q: no string in the driver's code has the phrase %q", r.code, r.phrase, r.phrase)
		case !returned[r.code]:
			t.Errorf("row %q %q: the message with the phrase is returned with code %q, not %s", r.code, r.phrase, slices.Sorted(maps.Keys(returned)), r.code)
		}
	}
	for _, s := range src.sites {
		if !tableCodes[s.code] {
			t.Errorf("%s returns code %s, which the errors table has no row for", s.pos, s.code)
		}
		if s.code == codes.Internal.String() || s.format == "" || len(messageWords(s.format)) < 2 {
			continue
		}
		if !slices.ContainsFunc(rows, func(r errorRow) bool { return r.code == s.code && strings.Contains(s.format, r.phrase) }) {
			t.Errorf("%s returns %s %q, which no row of the errors table finds (a row of that code with a phrase of the message)", s.pos, s.code, s.format)
		}
	}
}

// troubleshootingRows reads the errors table: | `Code` | `phrase` | meaning | fix |.
func troubleshootingRows(t *testing.T) []errorRow {
	t.Helper()
	table := docTable(t, operatingDoc, "<!-- errors table -->")
	row := regexp.MustCompile("^\\| `([A-Za-z]+)` \\| `([^`]+)` \\|")
	var rows []errorRow
	for i, line := range strings.Split(table, "\n") {
		if i < 2 { // the header and its rule
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s's errors table: %q is not a row | `Code` | `phrase` | meaning | fix |", operatingDoc, line)
			continue
		}
		rows = append(rows, errorRow{code: m[1], phrase: m[2]})
	}
	return rows
}

func isGRPCCode(name string) bool {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return true
		}
	}
	return false
}

// messageWords is the words of a format string, its verbs left out.
func messageWords(format string) []string {
	format = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z%]`).ReplaceAllString(format, " ")
	return regexp.MustCompile(`[A-Za-z_]{2,}`).FindAllString(format, -1)
}

// errorSites is what the troubleshooting test knows of the driver's code (the root package as
// built, tests left out), by function.
type errorSites struct {
	literals []literal
	sites    []site
	funcs    map[*ast.FuncDecl]*funcFacts
}

// literal is a string constant (a concatenation of literals counts as one) and its function.
type literal struct {
	text string
	fn   *ast.FuncDecl
}

// site is a place that returns a gRPC code: status.Error(f)(codes.X, format, ...), or
// invalidf(format, ...), which toStatus turns into InvalidArgument. format is "" unless constant.
type site struct {
	pos     string
	code    string
	format  string
	callees map[string]bool // the functions called in its arguments, e.g. deniedMessage
}

type funcFacts struct {
	codes       map[string]bool // codes.X named in the function, and InvalidArgument if it calls invalidf
	idents      map[string]bool // every identifier it uses: what it calls, the types it names
	constructs  map[string]bool // the types of its composite literals
	name, recvT string          // its name, and its receiver's type for a method
}

// loadErrorSites scans the driver's code whose messages reach the kubelet: the root, and the
// packages whose errors and messages the root returns: internal/share (about a share),
// internal/volume (about a volume's room) and internal/sourceaccess (what an admin runs).
func loadErrorSites(t *testing.T) *errorSites {
	t.Helper()
	fset := token.NewFileSet()
	s := &errorSites{funcs: map[*ast.FuncDecl]*funcFacts{}}
	for _, dir := range []string{".", "internal/share", "internal/volume", "internal/sourceaccess"} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range pkg.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				s.funcs[fn] = s.scan(fset, fn)
			}
		}
	}
	return s
}

// scan collects fn's facts, string constants and sites.
func (s *errorSites) scan(fset *token.FileSet, fn *ast.FuncDecl) *funcFacts {
	ff := &funcFacts{codes: map[string]bool{}, idents: map[string]bool{}, constructs: map[string]bool{}, name: fn.Name.Name}
	if fn.Recv != nil && len(fn.Recv.List) == 1 {
		ff.recvT = typeName(fn.Recv.List[0].Type)
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			ff.idents[n.Name] = true
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "codes" {
				ff.codes[n.Sel.Name] = true
			}
		case *ast.CompositeLit:
			if name := typeName(n.Type); name != "" {
				ff.constructs[name] = true
			}
		case *ast.BinaryExpr, *ast.BasicLit:
			if text, ok := stringConstant(n.(ast.Expr)); ok {
				s.literals = append(s.literals, literal{text: text, fn: fn})
				return false // a concatenation is one constant, not its parts
			}
		case *ast.CallExpr:
			if code, format, ok := errorCall(n); ok {
				if code == codes.InvalidArgument.String() {
					ff.codes[code] = true
				}
				callees := map[string]bool{}
				for _, a := range n.Args {
					ast.Inspect(a, func(m ast.Node) bool {
						if c, ok := m.(*ast.CallExpr); ok {
							switch f := c.Fun.(type) {
							case *ast.Ident:
								callees[f.Name] = true
							case *ast.SelectorExpr:
								callees[f.Sel.Name] = true
							}
						}
						return true
					})
				}
				s.sites = append(s.sites, site{pos: fset.Position(n.Pos()).String(), code: code, format: format, callees: callees})
			}
		}
		return true
	})
	return ff
}

// errorCall recognises status.Error(codes.X, format...), status.Errorf(codes.X, format, ...) and
// invalidf(format, ...).
func errorCall(call *ast.CallExpr) (code, format string, ok bool) {
	var fmtArg ast.Expr
	switch fun := call.Fun.(type) {
	case *ast.Ident:
		if fun.Name != "invalidf" || len(call.Args) == 0 {
			return "", "", false
		}
		code, fmtArg = codes.InvalidArgument.String(), call.Args[0]
	case *ast.SelectorExpr:
		pkg, isIdent := fun.X.(*ast.Ident)
		if !isIdent || pkg.Name != "status" || (fun.Sel.Name != "Error" && fun.Sel.Name != "Errorf") || len(call.Args) < 2 {
			return "", "", false
		}
		c, isSel := call.Args[0].(*ast.SelectorExpr)
		if !isSel {
			return "", "", false
		}
		code, fmtArg = c.Sel.Name, call.Args[1]
	default:
		return "", "", false
	}
	format, _ = stringConstant(fmtArg)
	return code, format, true
}

// stringConstant folds a string literal, or a + of them, into its value.
func stringConstant(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		v, err := strconv.Unquote(e.Value)
		return v, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, ok1 := stringConstant(e.X)
		y, ok2 := stringConstant(e.Y)
		if !ok1 || !ok2 {
			return "", false
		}
		return x + y, true
	case *ast.ParenExpr:
		return stringConstant(e.X)
	}
	return "", false
}

// typeName is the name of a (pointer to a) named type, or "".
func typeName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return typeName(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr: // a generic receiver
		return typeName(e.X)
	}
	return ""
}

// codesOf is the codes the driver returns with a message holding phrase, and whether any string
// of its code holds phrase at all. Exact where the code says it: the codes of the calls whose
// format has the phrase; else those of the calls that build their message with the function
// whose string has it (status.Error(codes.PermissionDenied, deniedMessage(...))); else, for a
// message that reaches its status through an error value, the codes near it (codesNear).
func (s *errorSites) codesOf(phrase string) (map[string]bool, bool) {
	direct := map[string]bool{}
	for _, st := range s.sites {
		if strings.Contains(st.format, phrase) {
			direct[st.code] = true
		}
	}
	if len(direct) > 0 {
		return direct, true
	}
	var fns []*ast.FuncDecl
	for _, l := range s.literals {
		if strings.Contains(l.text, phrase) {
			fns = append(fns, l.fn)
		}
	}
	if len(fns) == 0 {
		return nil, false
	}
	built, near := map[string]bool{}, map[string]bool{}
	for _, fn := range fns {
		for _, st := range s.sites {
			if fn.Name.Name != "Error" && st.callees[fn.Name.Name] { // err.Error() is any error's
				built[st.code] = true
			}
		}
		maps.Copy(near, s.codesNear(fn))
	}
	if len(built) > 0 {
		return built, true
	}
	return near, true
}

// codesNear is the codes returned where a string of fn ends up in a status, one step away: those
// fn returns itself; those of every function that calls fn by name; and, where fn's string
// travels in an error value (fn is the Error method of an error type, or builds one), those
// returned in the branches that test for that type (if errors.As(err, new(*T)) {...}, or a
// variable set from such a test, in an if or a case). A message two calls away from its code is
// not near it: its row should name the phrase the nearer function adds.
func (s *errorSites) codesNear(fn *ast.FuncDecl) map[string]bool {
	ff := s.funcs[fn]
	near := maps.Clone(ff.codes)
	errTypes := map[string]bool{}
	for ty := range ff.constructs {
		if s.isErrorType(ty) {
			errTypes[ty] = true
		}
	}
	if ff.name == "Error" && ff.recvT != "" {
		errTypes[ff.recvT] = true
	}
	for g, gf := range s.funcs {
		if g == fn {
			continue
		}
		if ff.name != "Error" && gf.idents[ff.name] {
			maps.Copy(near, gf.codes)
		}
		maps.Copy(near, branchCodes(g, errTypes))
	}
	return near
}

// branchCodes is the codes g returns in its branches that test for one of the error types.
func branchCodes(g *ast.FuncDecl, errTypes map[string]bool) map[string]bool {
	tests := maps.Clone(errTypes)       // the types, and g's variables set from a test of them
	mentions := func(e ast.Node) bool { // a negated test (!broken) does not count
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if u, ok := n.(*ast.UnaryExpr); ok && u.Op == token.NOT {
				return false
			}
			if id, ok := n.(*ast.Ident); ok && tests[id.Name] {
				found = true
			}
			return !found
		})
		return found
	}
	ast.Inspect(g.Body, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
			for i, r := range as.Rhs {
				if id, ok := as.Lhs[i].(*ast.Ident); ok && mentions(r) {
					tests[id.Name] = true
				}
			}
		}
		return true
	})
	found := map[string]bool{}
	collect := func(body ast.Node) {
		ast.Inspect(body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if code, _, ok := errorCall(call); ok {
					found[code] = true
				}
			}
			return true
		})
	}
	ast.Inspect(g.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt:
			if mentions(n.Cond) {
				collect(n.Body)
			}
		case *ast.CaseClause:
			if slices.ContainsFunc(n.List, func(e ast.Expr) bool { return mentions(e) }) {
				for _, st := range n.Body {
					collect(st)
				}
			}
		}
		return true
	})
	return found
}

// isErrorType says whether the driver's code defines an Error method on the type name.
func (s *errorSites) isErrorType(name string) bool {
	for _, ff := range s.funcs {
		if ff.name == "Error" && ff.recvT == name {
			return true
		}
	}
	return false
}

// Every image an example runs has what the example runs in it: busybox (a shell, cat), or the
// driver's image the README's install from source pushes (registry.example.com/...:VERSION, the
// `make release` line's REGISTRY and VERSION), which has every subcommand of this tree. No
// example names a published release's image while none is published. The pod suite applies each
// example with those images (TestPodsExamplesWork, TestPodsRestartOnChangeExampleWorks).
func TestExamplesRunImagesThatExist(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^make release REGISTRY=(\S+) VERSION=(\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("README.md has no line `make release REGISTRY=... VERSION=...`")
	}
	driverImage := m[1] + "/shared-resource-csi:" + m[2]
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples (%v)", err)
	}
	image := regexp.MustCompile(`(?m)^\s*(?:-\s+)?image:\s*(\S+)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range image.FindAllStringSubmatch(string(b), -1) {
			if !strings.HasPrefix(im[1], "busybox:") && im[1] != driverImage {
				t.Errorf("%s runs image %s: an example runs busybox or the image README.md's install produces, %s", f, im[1], driverImage)
			}
		}
	}
}
