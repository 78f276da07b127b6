package conveyor_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// A public doc comment is one a user reads on pkg.go.dev: the package
// comment and the comments of the exported declarations (and of their
// exported fields, methods and grouped constants) of every package of the
// module that is not under an internal/ folder, not a test file and not the
// bench/ module. It names an internal identifier, and TestPublicDocNamesNoInternal
// fails, when it holds one of these:
//
//  1. P.N, where P is the name of a package under internal/ (core, layout,
//     jsonenc, tracing, wire, testlog, ...) and N is exported (it starts
//     with an upper-case letter) or is declared in P: `core.Record`.
//  2. A path through an internal/ folder: internal/core, .../internal/wire.
//  3. In backquotes, the bare name of an internal package or folder:
//     `core`, `testkit`.
//  4. P.n, where P is the package's own name, or a type it declares, and n
//     is an unexported top-level name of the package, or an unexported
//     method or field of that type: run.newRunner, Queue.claimNext.
//  5. In backquotes, an unexported top-level name of the package,
//     optionally followed by a call's parentheses: `newRunner`,
//     `claimNext()`.
//  6. Anywhere, an unexported top-level name of the package written in
//     camelCase (an upper-case letter after the first): pageBudget(limit).
//
// Each rule needs code punctuation (a dot between two identifiers with no
// space, a slash, backquotes) or a camelCase word, which English has not,
// and, but for rule 1's exported N and rule 2, a name the code declares;
// so plain English never matches: "the core. Then" has a space,
// "status.json" names no declared member, and a word in backquotes counts
// only when it is a name the package declares.
func TestPublicDocNamesNoInternal(t *testing.T) {
	t.Parallel()
	m := scanModule(t, ".")
	var bad []string
	for _, p := range m.public {
		for _, c := range p.comments {
			for _, hit := range m.internal.check(p.names, c.text) {
				bad = append(bad, p.dir+": "+c.where+": "+hit)
			}
		}
	}
	if len(m.public) < 10 || len(m.internal.decls) < 3 {
		t.Fatalf("found %d public and %d internal packages: the walk is broken", len(m.public), len(m.internal.decls))
	}
	for _, b := range bad {
		t.Errorf("%s (say what it does instead)", b)
	}
}

// TestDocNameRules holds each rule of TestPublicDocNamesNoInternal to a
// line that breaks it and to plain English that must pass.
func TestDocNameRules(t *testing.T) {
	t.Parallel()
	in := internals{
		decls:   map[string]map[string]bool{"core": {"Record": true, "poll": true}, "wire": {"Body": true}},
		folders: map[string]bool{"testkit": true},
	}
	own := pkgNames{
		name:       "run",
		unexported: map[string]bool{"newRunner": true, "lease": true},
		members:    map[string]map[string]bool{"Runner": {"claimNext": true}},
	}
	tests := []struct {
		text string
		want int
	}{
		{"It takes the lease through core.Record.", 1},
		{"a stale core.Poll still counts", 1},
		{"core.poll is unexported but declared", 1},
		{"see internal/core and adapters/httpapi/internal/wire", 2},
		{"the rigs of `testkit` and `core`", 2},
		{"built by run.newRunner", 1},
		{"the loop calls Runner.claimNext", 1},
		{"the `lease` and `newRunner()`", 2},
		{"wire.Body (the request)", 1},
		{"at most newRunner(limit) of them", 1},
		// Plain English and code that names nothing internal.
		{"The core of it. Then the layout, tracing and wire.", 0},
		{"status.json, manifest.json and core.go are files.", 0},
		{"the lease is renewed; run.Runner and `Runner` are public", 0},
		{"Runner.Submit, run.Status and `status` are fine", 0},
		{"an internal error, internal/ folders aside", 0},
		{"cfg.core.Poll is a field's path, not the package", 0},
		{"a lease(s) and a newRunnerX or cfg.newRunner", 0},
	}
	for _, tt := range tests {
		if got := in.check(own, tt.text); len(got) != tt.want {
			t.Errorf("%q: %d hits %q, want %d", tt.text, len(got), got, tt.want)
		}
	}
}

// internals is what the packages under internal/ declare.
type internals struct {
	decls   map[string]map[string]bool // package name → its top-level names
	folders map[string]bool            // folders under internal/ that hold no package of their own name
}

// pkgNames is what a public package declares that its users cannot name.
type pkgNames struct {
	name       string
	unexported map[string]bool            // unexported top-level names
	members    map[string]map[string]bool // type → its unexported methods and fields
}

type comment struct{ where, text string }

type publicPkg struct {
	dir      string
	names    pkgNames
	comments []comment
}

type modScan struct {
	internal internals
	public   []publicPkg
}

var (
	// qualRe is P.N with nothing of a path or selector before P.
	qualRe     = regexp.MustCompile(`(?:^|[^\w./])([A-Za-z_]\w*)\.([A-Za-z_]\w*)`)
	internalRe = regexp.MustCompile(`(?:^|[^\w./-])((?:[\w.-]+/)*internal/\w[\w./]*)`)
	quoteRe    = regexp.MustCompile("`([^`]+)`")
	callRe     = regexp.MustCompile(`^([A-Za-z_]\w*)(?:\(\))?$`)
	camelRe    = regexp.MustCompile(`(?:^|[^\w.])([a-z]\w*[A-Z]\w*)`)
)

// check returns what text names that own's users cannot, by the rules of
// TestPublicDocNamesNoInternal.
func (in internals) check(own pkgNames, text string) []string {
	var hits []string
	for _, m := range qualRe.FindAllStringSubmatch(text, -1) {
		p, n := m[1], m[2]
		switch {
		case in.decls[p] != nil && (unicode.IsUpper(rune(n[0])) || in.decls[p][n]):
			hits = append(hits, "names internal "+p+"."+n)
		case p == own.name && own.unexported[n], own.members[p][n]:
			hits = append(hits, "names unexported "+p+"."+n)
		}
	}
	for _, m := range internalRe.FindAllStringSubmatch(text, -1) {
		hits = append(hits, "names internal path "+strings.TrimRight(m[1], "./"))
	}
	for _, m := range quoteRe.FindAllStringSubmatch(text, -1) {
		q := strings.TrimSpace(m[1])
		switch {
		case in.decls[q] != nil || in.folders[q]:
			hits = append(hits, "names internal package `"+q+"`")
		case callRe.MatchString(q) && own.unexported[callRe.FindStringSubmatch(q)[1]]:
			hits = append(hits, "names unexported `"+q+"`")
		}
	}
	for _, m := range camelRe.FindAllStringSubmatch(text, -1) {
		if own.unexported[m[1]] && !strings.Contains(text, "`"+m[1]) {
			hits = append(hits, "names unexported "+m[1])
		}
	}
	return hits
}

// scanModule parses every package under root but bench/, testdata and
// hidden folders: those under an internal/ folder for their names, the
// others for their public doc comments.
func scanModule(t *testing.T, root string) modScan {
	t.Helper()
	m := modScan{internal: internals{decls: map[string]map[string]bool{}, folders: map[string]bool{}}}
	type parsed struct {
		dir   string
		fset  *token.FileSet
		files []*ast.File
	}
	var public []parsed
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || p == filepath.Join(root, "bench")) {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != root {
			return filepath.SkipDir // another module
		}
		fset, files := parseDir(t, p)
		isInternal := slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "internal")
		switch {
		case isInternal && len(files) == 0 && name != "internal":
			m.internal.folders[name] = true
		case isInternal && len(files) > 0:
			decls := m.internal.decls[files[0].Name.Name]
			if decls == nil {
				decls = map[string]bool{}
				m.internal.decls[files[0].Name.Name] = decls
			}
			for _, f := range files {
				for _, d := range f.Decls {
					for _, n := range declNames(d) {
						decls[n] = true
					}
				}
			}
		case len(files) > 0:
			public = append(public, parsed{filepath.ToSlash(p), fset, files})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range public {
		names := ownNames(p.files)
		dp, err := doc.NewFromFiles(p.fset, p.files, path.Join(module, p.dir))
		if err != nil {
			t.Fatalf("%s: %v", p.dir, err)
		}
		m.public = append(m.public, publicPkg{dir: p.dir, names: names, comments: publicComments(dp)})
	}
	return m
}

// parseDir parses the package's files in dir, tests left out.
func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return fset, files
}

// declNames returns the top-level names a declaration declares.
func declNames(d ast.Decl) []string {
	var names []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv == nil {
			names = append(names, d.Name.Name)
		}
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				names = append(names, s.Name.Name)
			case *ast.ValueSpec:
				for _, n := range s.Names {
					names = append(names, n.Name)
				}
			}
		}
	}
	return names
}

// ownNames collects a package's unexported names, before go/doc filters
// them out of the syntax.
func ownNames(files []*ast.File) pkgNames {
	n := pkgNames{name: files[0].Name.Name, unexported: map[string]bool{}, members: map[string]map[string]bool{}}
	member := func(typ, name string) {
		if n.members[typ] == nil {
			n.members[typ] = map[string]bool{}
		}
		n.members[typ][name] = true
	}
	for _, f := range files {
		for _, d := range f.Decls {
			for _, name := range declNames(d) {
				if name != "_" && !ast.IsExported(name) {
					n.unexported[name] = true
				}
			}
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && !ast.IsExported(fd.Name.Name) {
				member(recvType(fd.Recv.List[0].Type), fd.Name.Name)
			}
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok {
					continue
				}
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, fld := range st.Fields.List {
						for _, fn := range fld.Names {
							if !ast.IsExported(fn.Name) {
								member(ts.Name.Name, fn.Name)
							}
						}
					}
				}
			}
		}
	}
	return n
}

// recvType is the name of a method's receiver type.
func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// publicComments returns the doc comments of a package's exported API:
// go/doc has already left out the unexported declarations, fields and
// methods.
func publicComments(p *doc.Package) []comment {
	cs := []comment{{"package " + p.Name, p.Doc}}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			where := strings.Join(v.Names, ", ")
			cs = append(cs, comment{where, v.Doc})
			for _, s := range v.Decl.Specs {
				vs := s.(*ast.ValueSpec)
				cs = append(cs, comment{where, vs.Doc.Text()}, comment{where, vs.Comment.Text()})
			}
		}
	}
	funcs := func(recv string, fs []*doc.Func) {
		for _, f := range fs {
			cs = append(cs, comment{recv + f.Name, f.Doc})
		}
	}
	values(p.Consts)
	values(p.Vars)
	funcs("", p.Funcs)
	for _, t := range p.Types {
		cs = append(cs, comment{t.Name, t.Doc})
		for _, s := range t.Decl.Specs {
			ts := s.(*ast.TypeSpec)
			cs = append(cs, comment{t.Name, ts.Doc.Text()}, comment{t.Name, ts.Comment.Text()})
			var fields *ast.FieldList
			switch x := ts.Type.(type) {
			case *ast.StructType:
				fields = x.Fields
			case *ast.InterfaceType:
				fields = x.Methods
			}
			if fields == nil {
				continue
			}
			for _, f := range fields.List {
				where := t.Name
				if len(f.Names) > 0 {
					where += "." + f.Names[0].Name
				}
				cs = append(cs, comment{where, f.Doc.Text()}, comment{where, f.Comment.Text()})
			}
		}
		values(t.Consts)
		values(t.Vars)
		funcs("", t.Funcs)
		funcs(t.Name+".", t.Methods)
	}
	return cs
}
