package conveyor_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The public surface: what a user can name. A package is public when its
// path has no internal/ element, is not under examples/ or bench/ (its own
// module) and is not a main package; its surface is its package-level
// exported names plus the exported methods of its exported types (fields
// are not counted). A cap below may be raised only with the reason beside
// it saying why the name is a user's.
const (
	// surfaceTotalCap bounds the exported names of all public packages
	// together (River's six user packages: about 430). 500 -> 514:
	// Queue.Reconcile (an operator's repair after a store incident), the
	// job queue's InsertFunc and ResultAs (issue 30: middleware around
	// insert, a typed result); conveyortest's StartAgent and AgentRun with
	// its six methods, a test answering a run's approval gate or external
	// wait and going on (issue 31); a named queue's pause
	// (Queue.SetPaused, Operator.SetPaused) and concurrency (QueueConfig);
	// the dashboard's counts, last hour and bulk cancel; lifecycle.Unique
	// and jobqueue.Snooze, unique jobs and snooze (issue 30); jobqueue.Operator
	// (the Queue's operator side on a type of its own); the NLM backend
	// deployed apart and the artifact reads (issue 32: nlm.Backend, the
	// artifact record in lifecycle, the client's NLMBackend and artifact
	// reads); lifecycle.CompensationEntry and run.CompensateInput,
	// compensation (issue 31); the proposal record with its state and
	// three states in lifecycle, the client's Proposals with its pending
	// list, read and decision; inbox.Box.DispatchPending, the retry of the
	// job an inbox entry starts (issue 32); lifecycle's AllTenants,
	// WithTenant and TenantOf and run's ActiveRunsByTenant (issue 31's
	// tenants); lifecycle.TriggerSource and lifecycle.TokensUsed, the run
	// document's fields, and run.Runner.AllSteps, every declared step of a
	// run (issue 32); run.Runner.Input and client.Operator.RunInput, a
	// run's input on the run page (issue 31); jobqueue.CallbackBody, what
	// the queue posts to a job's callback (issue 32).
	surfaceTotalCap = 560
	// surfacePackagesCap bounds the number of public packages: 19 of the
	// house, and one kept for the SQLite store.
	surfacePackagesCap = 20
	// methodsCap bounds the methods of any type, exported or not
	// (exported and unexported methods together), in every package but
	// bench/.
	methodsCap = 25
	// funcLinesCap bounds any function or method outside tests, bench/
	// and examples/chaos; funcLinesReport is where one is reported.
	funcLinesCap    = 100
	funcLinesReport = 80
)

// surfaceCaps are the public packages and their caps, each with why its
// names are a user's. A public package missing here fails the test.
var surfaceCaps = map[string]struct {
	cap    int
	reason string
}{
	".":                       {40, "the Client and its Config, the one way in"},
	"lifecycle":               {178, "the types: records, states, wire bodies, typed errors, sentinels, codes users match on; 176 -> 178: TriggerSource and TokensUsed, a run's trigger_source and a step file's tokens_used, which the runner writes and the server and the client (no engine) read; 173 -> 176: AllTenants, WithTenant and TenantOf, the tenant a call acts for, which every engine, the server and a user's code share (what a tenant may see is internal/tenancy's); 168 -> 173: Proposal, ProposalState and its three states, the proposal record the runner writes, the server serves and the client and the CLI read (the client imports no engine); 165 -> 168: Artifact and ArtifactType, the artifact record, which the artifact store, the server and the client (no engine) share, and CompensationEntry, a run's compensation_log entry; 164 -> 165: Unique, a job's uniqueness (NewJob.Unique), which the queue, the server, the client and a user's code share; 160 -> 164: JobCounts, JobCountRow, JobActivity and JobActivityMinute, the dashboard's counts and last hour that the queue, the server and the client share; 151 -> 160: the general job machine's two states (RUNNING, CANCELLED) and its name as a job record carries it, and cancel's refusal, which the queue and the Go client both return: ErrJobFinished, ErrJobNotCancellable, JobCancelError with Error, Is, Code; 148 -> 151: MinPriority, MaxPriority and DefaultPriority, the range of a job's priority that the queue, the server, the client and a user's code share; 143 -> 148: JobHistory, JobAttempt, BulkResult, BulkFailure and QueueLane, the job page's bodies (a job's history, a bulk action's answer, a lane) that the queue, the server and the client share (the client imports no engine); 142 -> 143: ScheduleJob, the job of a periodic job's schedule, which the root Config, the scheduler, the server and the client share as they share Schedule; 139 -> 142: BatchError with its Error and Unwrap, the failure of a batch insert that the job queue and the Go client both return (the client imports no engine); 130 -> 139: four for what the job queue and the NLM processor both speak (JobOutput, SourceRef, ErrInvalidJob, DefaultProject), so the NLM processor no longer imports the queue, Schedules, the scheduler's public face, and Schedule with ScheduleProgress (4 with its JSON methods), the one schedule type the root Config, the scheduler, the server and the client share (the root's copy, 3 names, went)"},
	"lifecycle/clock":         {14, "Clock, Real, and the Fake with the controls a test moves it by"},
	"lifecycle/run":           {45, "the Runner, the agent interfaces and the run config"},
	"lifecycle/nlm":           {15, "the NLM processor; 12 -> 15: Backend, Processor.Artifact and Processor.Artifacts, so a backend deployed apart is asked as one in the process is"},
	"lifecycle/conveyortest":  {15, "the one user test kit for agents and handlers; 10 -> 15: StartAgent and AgentRun (Status, Steps, Approve, Reject, Deliver, Cancel), to answer a parked run and continue it"},
	"jobqueue":                {62, "the Queue, its handlers and the job config; 61 -> 62: CallbackBody, the body posted to a job's callback URL, for receivers to decode; 60 -> 61: Operator, the operator's and the dashboard's side of the queue (lanes, history, counts, last hour, bulk requeue and cancel, pause, reconcile) on a type of its own so Queue stays within its 25 methods; 59 -> 60: Snooze, what a handler returns to run its job again later; 56 -> 59: CancelMatching, Counts and Activity, the dashboard's bulk cancel, counts and charts; 52 -> 56: InsertFunc, the link of the insert middleware a user writes (Config.InsertMiddleware), ResultAs, a job's result read back as the Go type its Typed handler returned, SetPaused (pause and resume in one method) and QueueConfig, a named queue's concurrency; 51 -> 52: Reconcile, an operator's repair after a store incident; 50 -> 51: Queue.Cancel; 45 -> 50: History, RequeueMatching and Lanes, the job page's reads and bulk action, with the bounds a caller plans by (MaxBulk, MaxLaneLocks)"},
	"artifact":                {20, "the artifact store"},
	"inbox":                   {15, "the inbox"},
	"storage":                 {37, "the portable Store, its conditions, versions, errors, patience and commits of several writes"},
	"storage/driver":          {24, "the contract an adapter implements, and its optional capabilities"},
	"storage/storetest":       {8, "the conformance suite's entry points and its Harness"},
	"adapters/memstore":       {5, "an in-memory Store and its driver"},
	"adapters/filestore":      {8, "a directory Store, its driver and its option"},
	"adapters/sqlitestore":    {6, "a SQLite Store, its config and its driver"},
	"adapters/s3store":        {18, "an S3 Store, its config, and the driver a program checks (its error categories) and creates the bucket with"},
	"adapters/httpapi":        {15, "the HTTP server"},
	"adapters/httpapi/client": {55, "the Go client of the HTTP API; 54 -> 55: Operator.RunInput, a run's input for the run page; 50 -> 54: Proposals with Pending, Get and Decide, the proposals runs create and the gateway's decision, on a type of their own so Client stays within its 25 methods; 44 -> 50: NLMBackend with Accept, Get and Artifact, an NLM backend deployed apart as the NLM package's Ask and Sink take it, and Operator.Artifact and Operator.JobArtifact, the artifact reads the matrix grants; 41 -> 44: Operator.CancelJobs, JobCounts and JobActivity; 40 -> 41: Operator.SetPaused, a named queue's pause and resume; 39 -> 40: Operator.CancelJob; 35 -> 39: Operator with JobHistory, RequeueJobs and Queues, the dashboard's routes, on a type of their own so Client stays within its 25 methods"},
	"adapters/otlp":           {2, "the OTLP span exporter from the standard variables"},
}

// methodsExceptions are types allowed past methodsCap, each with why;
// keep it empty.
var methodsExceptions = map[string]string{}

// surface is what measureSurface finds in a tree.
type surface struct {
	exported map[string][]string // public package -> its exported names
	methods  map[string]int      // "pkg.Type" (exported types) -> methods
	long     map[string]int      // "file:func" -> lines, past funcLinesReport
}

// TestSurface measures the module and fails past any cap; it logs the
// whole table either way, so a change sees where it stands.
func TestSurface(t *testing.T) {
	s, err := measureSurface(".")
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + s.table())
	for _, f := range s.check() {
		t.Error(f)
	}
	// Unexported types are measured too: a run's execution was over the
	// cap, unseen, while only exported ones were.
	if n := s.methods["lifecycle/run.execution"]; n == 0 {
		t.Error("the methods of lifecycle/run's execution were not counted")
	}
}

// TestSurfaceCheck: the checker fails on each kind of excess.
func TestSurfaceCheck(t *testing.T) {
	t.Parallel()
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("N%d", i)
		}
		return out
	}
	within := func() surface {
		return surface{
			exported: map[string][]string{"storage": names(surfaceCaps["storage"].cap), ".": names(40)},
			methods:  map[string]int{"storage.Store": 25},
			long:     map[string]int{"storage/x.go:f": 100},
		}
	}
	if f := within().check(); len(f) != 0 {
		t.Fatalf("a surface within its caps fails: %q", f)
	}
	tests := []struct {
		name    string
		breakIt func(s *surface)
		want    string
	}{
		{"a package past its cap", func(s *surface) { s.exported["storage"] = names(surfaceCaps["storage"].cap + 1) },
			fmt.Sprintf("storage exports %d", surfaceCaps["storage"].cap+1)},
		{"a package without a cap", func(s *surface) { s.exported["lifecycle/new"] = names(1) }, "lifecycle/new is public"},
		{"too many packages", func(s *surface) {
			for i := range surfacePackagesCap {
				s.exported[fmt.Sprintf("p%d", i)] = nil
			}
		}, "public packages"},
		{"too many names", func(s *surface) { s.exported["lifecycle"] = names(surfaceTotalCap) }, "exported names in all"},
		{"a type with too many methods", func(s *surface) { s.methods["storage.Store"] = 26 }, "storage.Store has 26 methods"},
		{"a function too long", func(s *surface) { s.long["storage/x.go:f"] = 101 }, "storage/x.go:f is 101 lines"},
	}
	for _, tt := range tests {
		s := within()
		tt.breakIt(&s)
		f := s.check()
		if !slices.ContainsFunc(f, func(m string) bool { return strings.Contains(m, tt.want) }) {
			t.Errorf("%s: failures %q, want one with %q", tt.name, f, tt.want)
		}
	}
}

// check lists how s breaks the caps.
func (s surface) check() []string {
	var fails []string
	total := 0
	for _, pkg := range slices.Sorted(maps.Keys(s.exported)) {
		n := len(s.exported[pkg])
		total += n
		c, ok := surfaceCaps[pkg]
		switch {
		case !ok:
			fails = append(fails, fmt.Sprintf("%s is public (%d names) and has no cap: move it under internal/, or add its cap with a reason", pkg, n))
		case n > c.cap:
			fails = append(fails, fmt.Sprintf("%s exports %d names, more than its cap of %d (%s)", pkg, n, c.cap, c.reason))
		}
	}
	if len(s.exported) > surfacePackagesCap {
		fails = append(fails, fmt.Sprintf("%d public packages, more than %d", len(s.exported), surfacePackagesCap))
	}
	if total > surfaceTotalCap {
		fails = append(fails, fmt.Sprintf("%d exported names in all, more than %d", total, surfaceTotalCap))
	}
	for _, typ := range slices.Sorted(maps.Keys(s.methods)) {
		if n := s.methods[typ]; n > methodsCap && methodsExceptions[typ] == "" {
			fails = append(fails, fmt.Sprintf("%s has %d methods, more than %d", typ, n, methodsCap))
		}
	}
	for _, fn := range slices.Sorted(maps.Keys(s.long)) {
		if n := s.long[fn]; n > funcLinesCap {
			fails = append(fails, fmt.Sprintf("%s is %d lines, more than %d", fn, n, funcLinesCap))
		}
	}
	return fails
}

// table renders what s measured: each public package's count and cap, the
// types past methodsCap and the functions past funcLinesReport.
func (s surface) table() string {
	var b strings.Builder
	total := 0
	pkgs := slices.SortedFunc(maps.Keys(s.exported), func(a, b string) int {
		return len(s.exported[b]) - len(s.exported[a])
	})
	for _, pkg := range pkgs {
		n := len(s.exported[pkg])
		total += n
		c := "no cap"
		if sc, ok := surfaceCaps[pkg]; ok {
			c = fmt.Sprintf("cap %d", sc.cap)
		}
		fmt.Fprintf(&b, "%5d  %-28s %s\n", n, pkg, c)
	}
	fmt.Fprintf(&b, "%5d  exported names in %d public packages (caps %d in %d)\n", total, len(pkgs), surfaceTotalCap, surfacePackagesCap)
	for _, typ := range slices.Sorted(maps.Keys(s.methods)) {
		if n := s.methods[typ]; n > methodsCap {
			fmt.Fprintf(&b, "%5d  methods of %s (cap %d)\n", n, typ, methodsCap)
		}
	}
	for _, fn := range slices.Sorted(maps.Keys(s.long)) {
		fmt.Fprintf(&b, "%5d  lines in %s (reported past %d, cap %d)\n", s.long[fn], fn, funcLinesReport, funcLinesCap)
	}
	return b.String()
}

// measureSurface parses the non-test Go files under root (all of them,
// whatever their build constraints; a name declared in two files for two
// platforms counts once).
func measureSurface(root string) (surface, error) {
	s := surface{exported: map[string][]string{}, methods: map[string]int{}, long: map[string]int{}}
	names := map[string]map[string]bool{}
	methods := map[string]map[string]bool{} // "pkg.Type" -> method names
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(p)
		if d.IsDir() {
			if n := d.Name(); rel != "." && (strings.HasPrefix(n, ".") || n == "testdata" || rel == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		public := !strings.Contains("/"+pkg+"/", "/internal/") && pkg != "examples" &&
			!strings.HasPrefix(pkg, "examples/") && f.Name.Name != "main"
		if public && names[pkg] == nil {
			names[pkg] = map[string]bool{}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				measureFunc(fset, &s, rel, pkg, decl)
				typ := receiver(decl)
				if typ == "" {
					if public && decl.Name.IsExported() {
						names[pkg][decl.Name.Name] = true
					}
					continue
				}
				key := pkg + "." + typ
				if methods[key] == nil {
					methods[key] = map[string]bool{}
				}
				methods[key][decl.Name.Name] = true
				if public && ast.IsExported(typ) && decl.Name.IsExported() {
					names[pkg][typ+"."+decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if public && spec.Name.IsExported() {
							names[pkg][spec.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if public && n.IsExported() {
								names[pkg][n.Name] = true
							}
						}
					}
				}
			}
		}
		return nil
	})
	for pkg, ns := range names {
		s.exported[pkg] = slices.Sorted(maps.Keys(ns))
	}
	for typ, ms := range methods {
		s.methods[typ] = len(ms)
	}
	return s, err
}

// measureFunc notes decl when it is long, unless it is in examples/chaos.
func measureFunc(fset *token.FileSet, s *surface, file, pkg string, decl *ast.FuncDecl) {
	if pkg == "examples/chaos" || strings.HasPrefix(pkg, "examples/chaos/") {
		return
	}
	lines := fset.Position(decl.End()).Line - fset.Position(decl.Pos()).Line + 1
	if lines > funcLinesReport {
		name := decl.Name.Name
		if typ := receiver(decl); typ != "" {
			name = typ + "." + name
		}
		s.long[file+":"+name] = lines
	}
}

// receiver is the name of decl's receiver type, "" for a function.
func receiver(decl *ast.FuncDecl) string {
	if decl.Recv == nil || len(decl.Recv.List) == 0 {
		return ""
	}
	t := decl.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
