// walk measures how often the walk of a run returns to a file it already
// left: from (*run.Runner).Submit and from the loop (*run.Runner).Run, it
// follows the static calls into the module's functions and methods
// (depth-first, in source order, each function once), records the file of
// each function visited, and counts the entries into a file the walk had
// already left.
//
//	cd bench && go run ./cmd/walk -refs -only-pkg ..   # the figure docs/design.md gives
//	cd bench && go run ./cmd/walk [-v] [-refs] ..     # calls into every package
//
// -refs also follows functions and methods the body names without calling
// them (method values handed to a helper, e.g. a poll func); -v prints the
// walk.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

const modPath = "github.com/runconveyor/conveyor"

var (
	verbose = flag.Bool("v", false, "print the walk")
	refs    = flag.Bool("refs", false, "follow functions named without a call too")
	roots   = flag.String("roots", "Runner.Submit,Runner.Run", "methods of the run package to start from")
	pkgRun  = flag.String("pkg", modPath+"/lifecycle/run", "the package of the roots")
	onlyPkg = flag.Bool("only-pkg", false, "follow calls into the roots' package only")
)

type fn struct {
	obj  *types.Func
	decl *ast.FuncDecl
	info *types.Info
	file string
}

func main() {
	flag.Parse()
	dir, err := filepath.Abs(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo | packages.NeedDeps | packages.NeedImports,
		Dir:  dir,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	funcs := map[*types.Func]*fn{}
	var fset *token.FileSet
	var runPkg *packages.Package
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		if !strings.HasPrefix(p.PkgPath, modPath) || strings.HasSuffix(p.PkgPath, ".test") || strings.HasSuffix(p.Name, "_test") {
			return
		}
		if fset == nil {
			fset = p.Fset
		}
		if p.PkgPath == *pkgRun {
			runPkg = p
		}
		for _, f := range p.Syntax {
			name := p.Fset.Position(f.Pos()).Filename
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			rel, _ := filepath.Rel(dir, name)
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				obj, _ := p.TypesInfo.Defs[fd.Name].(*types.Func)
				if obj == nil {
					continue
				}
				funcs[obj] = &fn{obj: obj, decl: fd, info: p.TypesInfo, file: rel}
			}
		}
	})
	if runPkg == nil {
		fmt.Fprintln(os.Stderr, "no package", *pkgRun)
		os.Exit(1)
	}
	var start []*fn
	for _, r := range strings.Split(*roots, ",") {
		typ, meth, _ := strings.Cut(r, ".")
		tn := runPkg.Types.Scope().Lookup(typ)
		if tn == nil {
			fmt.Fprintln(os.Stderr, "no type", typ)
			os.Exit(1)
		}
		obj, _, _ := types.LookupFieldOrMethod(tn.Type(), true, runPkg.Types, meth)
		f, ok := obj.(*types.Func)
		if !ok || funcs[f] == nil {
			fmt.Fprintln(os.Stderr, "no method", r)
			os.Exit(1)
		}
		start = append(start, funcs[f])
	}

	w := &walker{funcs: funcs, seen: map[*types.Func]bool{}, left: map[string]bool{}}
	for _, s := range start {
		w.visit(s, 0)
	}
	fmt.Printf("functions visited: %d, files: %d, returns to a file already left: %d\n", len(w.seen), len(w.files), w.returns)
	if *verbose {
		type kv struct {
			file string
			n    int
		}
		var byFile []kv
		for f, n := range w.back {
			byFile = append(byFile, kv{f, n})
		}
		sort.Slice(byFile, func(i, j int) bool {
			return byFile[i].n > byFile[j].n || byFile[i].n == byFile[j].n && byFile[i].file < byFile[j].file
		})
		fmt.Println("returns by file entered:")
		for _, e := range byFile {
			fmt.Printf("  %3d %s\n", e.n, e.file)
		}
	}
}

type walker struct {
	funcs   map[*types.Func]*fn
	seen    map[*types.Func]bool
	left    map[string]bool // files the walk was in and went out of
	cur     string
	files   []string
	returns int
	back    map[string]int
}

func (w *walker) enter(f *fn, depth int) {
	mark := ""
	if f.file != w.cur {
		if w.cur != "" {
			w.left[w.cur] = true
		}
		if w.left[f.file] {
			w.returns++
			if w.back == nil {
				w.back = map[string]int{}
			}
			w.back[f.file]++
			mark = "  <- back"
		} else {
			w.files = append(w.files, f.file)
		}
		w.cur = f.file
	}
	if *verbose {
		fmt.Printf("%s%s %s%s\n", strings.Repeat("  ", depth), name(f.obj), f.file, mark)
	}
}

func (w *walker) visit(f *fn, depth int) {
	if w.seen[f.obj] {
		return
	}
	w.seen[f.obj] = true
	w.enter(f, depth)
	for _, callee := range w.callees(f) {
		w.visit(callee, depth+1)
	}
}

// callees lists the module functions f calls statically, in source order,
// each once.
func (w *walker) callees(f *fn) []*fn {
	var out []*fn
	once := map[*types.Func]bool{}
	add := func(id *ast.Ident) {
		obj, ok := f.info.Uses[id].(*types.Func)
		if !ok {
			return
		}
		obj = obj.Origin()
		if sig, ok := obj.Type().(*types.Signature); ok && sig.Recv() != nil {
			if types.IsInterface(sig.Recv().Type()) {
				return // dynamic
			}
		}
		c := w.funcs[obj]
		if c == nil || once[obj] || *onlyPkg && obj.Pkg().Path() != *pkgRun {
			return
		}
		once[obj] = true
		out = append(out, c)
	}
	ast.Inspect(f.decl.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			switch fun := ast.Unparen(n.Fun).(type) {
			case *ast.Ident:
				add(fun)
			case *ast.SelectorExpr:
				add(fun.Sel)
			case *ast.IndexExpr:
				if id, ok := fun.X.(*ast.Ident); ok {
					add(id)
				} else if s, ok := fun.X.(*ast.SelectorExpr); ok {
					add(s.Sel)
				}
			case *ast.IndexListExpr:
				if id, ok := fun.X.(*ast.Ident); ok {
					add(id)
				} else if s, ok := fun.X.(*ast.SelectorExpr); ok {
					add(s.Sel)
				}
			}
		case *ast.SelectorExpr:
			if *refs {
				add(n.Sel)
			}
		case *ast.Ident:
			if *refs {
				add(n)
			}
		}
		return true
	})
	return out
}

func name(f *types.Func) string {
	sig := f.Type().(*types.Signature)
	pkg := ""
	if f.Pkg() != nil {
		pkg = strings.TrimPrefix(f.Pkg().Path(), modPath+"/") + "."
	}
	if sig.Recv() != nil {
		t := sig.Recv().Type()
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := t.(*types.Named); ok {
			return pkg + n.Obj().Name() + "." + f.Name()
		}
	}
	return pkg + f.Name()
}
