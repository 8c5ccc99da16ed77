// Command walks measures the walk of a request through the driver's code: the files a reader
// visits, in order, following the calls from an entry point as they come in the source.
//
// Method (docs/how-it-works.md, "The two walks"): the driver's package (the repository root,
// production files only, default build tags) is type-checked; from the entry function, every call
// to a step is followed depth-first, in source order (closures read where they stand), each
// function read once (a second call to it is not followed again). A step is a method of the
// driver or of one of its parts: the types of the driver's fields, and the named types their
// methods and the driver's return, unless data (a volume's directory, a budget reservation, a
// relist cycle's memo; not a record). Plain functions
// and the methods of values (names, keys, lists) are read where they are called: their names say
// what they do, and following each would count a file for every helper. A call through an
// interface of the package (the mounter) is followed to its one production implementation. The reader reads a function's body in its file; going into a callee, and coming
// back to read on in the caller after the callee returns, puts the reader in another file when
// the two are in different files: each such change of file is a move. A move back up is one into
// a file already on the reader's stack (a caller's file): a return to a caller's file, or a call
// up into it. A return that is the last thing the caller reads is no move (the reader is done
// with that function and goes on wherever reading resumes).
//
// Usage: go run ./hack/walks [-v] ENTRY... where ENTRY is Type.method or function, e.g.
// nodeServer.NodePublishVolume driver.reconcileIfIdle.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	verbose := flag.Bool("v", false, "print each function read")
	layers := flag.String("layers", "", "a file listing the driver's files top to bottom, a layer a line: print every call that goes up the order")
	dir := flag.String("dir", ".", "the driver's package directory")
	flag.Parse()
	p, err := load(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *layers != "" {
		up, err := p.callsUp(*layers)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("calls up the layer order (%s): %d\n", *layers, len(up))
		for _, c := range up {
			fmt.Println("  " + c)
		}
	}
	if *verbose {
		var names []string
		for tn := range p.parts {
			names = append(names, tn.Name())
		}
		sort.Strings(names)
		fmt.Printf("steps: the methods of %s\n", strings.Join(names, ", "))
	}
	for _, entry := range flag.Args() {
		fn := p.lookup(entry)
		if fn == nil {
			fmt.Fprintf(os.Stderr, "no function %s\n", entry)
			os.Exit(1)
		}
		w := &walker{p: p, read: map[*types.Func]bool{}, verbose: *verbose}
		w.visit(fn, nil)
		fmt.Print(w.report(entry))
	}
}

type pkg struct {
	parts map[*types.TypeName]bool // the driver and its parts: their methods are steps
	fset  *token.FileSet
	info  *types.Info
	pkg   *types.Package
	decls map[*types.Func]*ast.FuncDecl
}

func load(dir string) (*pkg, error) {
	out, err := exec.Command("go", "list", "-f", "{{range .GoFiles}}{{.}}\n{{end}}", dir).Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	exports, err := exportData(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range strings.Fields(string(out)) {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Defs: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	tp, err := (&types.Config{Importer: imp}).Check("main", fset, files, info)
	if err != nil {
		return nil, err
	}
	p := &pkg{fset: fset, info: info, pkg: tp, decls: map[*types.Func]*ast.FuncDecl{}}
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				p.decls[info.Defs[fd.Name].(*types.Func)] = fd
			}
		}
	}
	p.parts = driverParts(tp)
	return p, nil
}

// driverParts are the driver's type, the types of its fields, and the named types their methods
// and the driver's return.
func driverParts(tp *types.Package) map[*types.TypeName]bool {
	parts := map[*types.TypeName]bool{}
	named := func(t types.Type) *types.Named {
		if ptr, ok := t.(*types.Pointer); ok {
			t = ptr.Elem()
		}
		n, _ := t.(*types.Named)
		if n == nil || n.Obj().Pkg() != tp {
			return nil
		}
		return n
	}
	drv := tp.Scope().Lookup("driver").(*types.TypeName)
	parts[drv] = true
	st := drv.Type().Underlying().(*types.Struct)
	var fields []*types.Named
	for i := range st.NumFields() {
		if n := named(st.Field(i).Type()); n != nil {
			fields = append(fields, n)
			parts[n.Obj()] = true
		}
	}
	for _, n := range append(fields, drv.Type().(*types.Named)) {
		ms := types.NewMethodSet(types.NewPointer(n))
		for i := range ms.Len() {
			res := ms.At(i).Obj().(*types.Func).Signature().Results()
			for j := range res.Len() {
				if r := named(res.At(j).Type()); r != nil && types.NewMethodSet(types.NewPointer(r)).Len() > 0 && !types.IsInterface(r) && !isData(r) {
					parts[r.Obj()] = true
				}
			}
		}
	}
	return parts
}

// isData says whether n is a value of data (a struct with exported fields: a record, a share's
// spec), not a part that acts.
func isData(n *types.Named) bool {
	st, ok := n.Underlying().(*types.Struct)
	if !ok {
		return true
	}
	for i := range st.NumFields() {
		if st.Field(i).Exported() {
			return true
		}
	}
	return false
}

// isStep says whether f is a method of the driver or of one of its parts.
func (p *pkg) isStep(f *types.Func) bool {
	recv := f.Signature().Recv()
	if recv == nil {
		return false
	}
	t := recv.Type()
	if ptr, ok := t.(*types.Pointer); ok {
		t = ptr.Elem()
	}
	n, ok := t.(*types.Named)
	if !ok {
		return false
	}
	if p.parts[n.Obj()] {
		return true
	}
	// The production implementation of an interface part (kernelMounter for mounter).
	for tn := range p.parts {
		if iface, ok := tn.Type().Underlying().(*types.Interface); ok && (types.Implements(n, iface) || types.Implements(types.NewPointer(n), iface)) {
			return true
		}
	}
	return false
}

// exportData maps each dependency's import path to its compiled export data.
func exportData(dir string) (map[string]string, error) {
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", dir).Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %w", err)
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), " "); ok && file != "" {
			m[path] = file
		}
	}
	return m, sc.Err()
}

func (p *pkg) lookup(name string) *types.Func {
	typ, method, isMethod := strings.Cut(name, ".")
	if !isMethod {
		f, _ := p.pkg.Scope().Lookup(name).(*types.Func)
		return f
	}
	tn, ok := p.pkg.Scope().Lookup(typ).(*types.TypeName)
	if !ok {
		return nil
	}
	obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(tn.Type()), true, p.pkg, method)
	f, _ := obj.(*types.Func)
	return f
}

// implementation resolves a method of one of the package's interfaces to its one production
// implementation in the package, if there is exactly one.
func (p *pkg) implementation(m *types.Func) *types.Func {
	recv := m.Signature().Recv()
	if recv == nil || !types.IsInterface(recv.Type()) {
		return m
	}
	iface, _ := recv.Type().Underlying().(*types.Interface)
	var found *types.Func
	for _, n := range p.pkg.Scope().Names() {
		tn, ok := p.pkg.Scope().Lookup(n).(*types.TypeName)
		if !ok || types.IsInterface(tn.Type()) || iface == nil {
			continue
		}
		for _, t := range []types.Type{tn.Type(), types.NewPointer(tn.Type())} {
			if types.Implements(t, iface) {
				obj, _, _ := types.LookupFieldOrMethod(t, true, p.pkg, m.Name())
				if f, ok := obj.(*types.Func); ok && p.decls[f] != nil {
					if found != nil && found != f {
						return m
					}
					found = f
				}
				break
			}
		}
	}
	if found == nil {
		return m
	}
	return found
}

// callsUp reads the layer order (a layer a line, its files separated by spaces; # comments) and
// returns every call, of any function of the package, from a file to a file of a layer above it.
// A call within a layer is allowed; a file missing from the order is an error.
func (p *pkg) callsUp(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rank := map[string]int{}
	for i, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		for _, f := range strings.Fields(line) {
			rank[f] = i
		}
	}
	var out []string
	seen := map[string]bool{}
	for f, fd := range p.decls {
		from := p.fileOf(f)
		if _, ok := rank[from]; !ok {
			return nil, fmt.Errorf("%s is not in %s", from, path)
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			g, ok := p.info.Uses[id].(*types.Func)
			if !ok || g.Pkg() != p.pkg || p.decls[g.Origin()] == nil {
				return true
			}
			to := p.fileOf(g.Origin())
			if rank[to] < rank[from] {
				c := fmt.Sprintf("%s %s -> %s %s", from, f.Name(), to, g.Name())
				if !seen[c] {
					seen[c] = true
					out = append(out, c)
				}
			}
			return true
		})
	}
	sort.Strings(out)
	return out, nil
}

// fileOf is the name of the file declaring f.
func (p *pkg) fileOf(f *types.Func) string {
	return filepath.Base(p.fset.Position(p.decls[f].Pos()).Filename)
}

// callees are the package's functions fd calls, in source order.
func (p *pkg) callees(fd *ast.FuncDecl) []*types.Func {
	var out []*types.Func
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var id *ast.Ident
		switch fun := ast.Unparen(call.Fun).(type) {
		case *ast.Ident:
			id = fun
		case *ast.SelectorExpr:
			id = fun.Sel
		case *ast.IndexExpr: // a generic function
			if i, ok := fun.X.(*ast.Ident); ok {
				id = i
			}
		}
		if id == nil {
			return true
		}
		f, ok := p.info.Uses[id].(*types.Func)
		if !ok || f.Pkg() != p.pkg {
			return true
		}
		f = p.implementation(f.Origin())
		if p.decls[f] != nil && p.isStep(f) {
			out = append(out, f)
		}
		return true
	})
	return out
}

type step struct {
	file string
	fn   string
	back bool // a move into a file already on the stack
	up   bool // of those, a call (not a return) up into a caller's file
}

type walker struct {
	p       *pkg
	read    map[*types.Func]bool
	steps   []step
	verbose bool
}

// at puts the reader in file, reading fn, with stack the files of the callers; call says the
// reader comes by a call, not back from one.
func (w *walker) at(file, fn string, stack []string, call bool) {
	if n := len(w.steps); n > 0 && w.steps[n-1].file == file {
		if w.verbose {
			fmt.Printf("    %s %s\n", file, fn)
		}
		return
	}
	back := false
	for _, s := range stack {
		if s == file {
			back = true
		}
	}
	w.steps = append(w.steps, step{file: file, fn: fn, back: back, up: back && call})
	if w.verbose {
		mark := ""
		if back {
			mark = " (back up)"
		}
		if back && call {
			mark = " (call up)"
		}
		fmt.Printf("->  %s %s%s\n", file, fn, mark)
	}
}

func (w *walker) visit(f *types.Func, stack []string) {
	w.read[f] = true
	file := w.p.fileOf(f)
	w.at(file, f.Name(), stack, true)
	calls := w.p.callees(w.p.decls[f])
	for i, c := range calls {
		if w.read[c] {
			continue
		}
		w.visit(c, append(stack, file))
		if w.readsOn(calls[i+1:]) {
			w.at(file, f.Name(), append(stack, file), false) // back in the caller's file
		}
	}
}

// readsOn says whether any of calls is still to be read: the reader must come back for it.
func (w *walker) readsOn(calls []*types.Func) bool {
	for _, c := range calls {
		if !w.read[c] {
			return true
		}
	}
	return false
}

func (w *walker) report(entry string) string {
	var b strings.Builder
	files := map[string]bool{}
	var order []string
	back, up := 0, 0
	for _, s := range w.steps {
		if s.up {
			up++
		}
		if !files[s.file] {
			files[s.file] = true
			order = append(order, s.file)
		}
		if s.back {
			back++
		}
	}
	var path []string
	for _, s := range w.steps {
		path = append(path, strings.TrimSuffix(s.file, ".go"))
	}
	fmt.Fprintf(&b, "%s: %d files, %d moves, %d back up (%d of them calls up into a caller's file)\n", entry, len(files), len(w.steps)-1, back, up)
	fmt.Fprintf(&b, "  files in order: %s\n", strings.Join(order, " "))
	fmt.Fprintf(&b, "  walk: %s\n", strings.Join(path, " > "))
	return b.String()
}
