package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// The Commit checks: the promises of driver.Committer, on drivers that make
// them (Store.CanCommit), skipped on the others. Each check but the two
// that need a *testing.T (Watch, and the portable layer's refusals) reports
// what it found wrong as a list of problems, so that the suite's own tests
// can show each one failing on a committer with the defect it looks for.

// commitCheck is one Commit check: its subtest's name and what it reports.
type commitCheck struct {
	name string
	fn   func(ctx context.Context, s *storage.Store, c Capabilities) problems
}

// commitChecks are the Commit checks that report problems, in order.
var commitChecks = []commitCheck{
	{"AllOrNothing", commitAllOrNothing},
	{"Versions", commitVersions},
	{"MixedPutAndDelete", commitMixed},
	{"CreateRace", commitCreateRace},
	{"CASRace", commitCASRace},
	{"AtomicVisibility", commitAtomicVisibility},
	{"MaxCommit", commitMax},
}

// problems is what a check found wrong.
type problems []string

func (p *problems) addf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// testCommit runs the Commit checks on a store that can commit, and skips
// on one that cannot.
func testCommit(t *testing.T, s *storage.Store, c Capabilities) {
	if !s.CanCommit() {
		t.Skipf("%T does not implement driver.Committer (Store.CanCommit is false): Commit is not checked", s.Unwrap())
	}
	for _, cc := range commitChecks {
		t.Run(cc.name, func(t *testing.T) {
			for _, p := range cc.fn(ctxT(t), s, c) {
				t.Error(p)
			}
		})
	}
	t.Run("WatchSignalled", func(t *testing.T) { commitWatch(t, s) })
	t.Run("RefusedBeforeTheDriver", func(t *testing.T) { commitRefused(t, s) })
}

// commitProblems runs every problem-reporting Commit check on s: the
// problems each found, by check name.
func commitProblems(ctx context.Context, s *storage.Store, c Capabilities) map[string][]string {
	out := map[string][]string{}
	for _, cc := range commitChecks {
		if p := cc.fn(ctx, s, c); len(p) > 0 {
			out[cc.name] = p
		}
	}
	return out
}

// state is what a key held: its value and version, or missing.
type state struct {
	exists  bool
	value   string
	version storage.Version
}

func readState(ctx context.Context, s *storage.Store, key string) (state, error) {
	b, v, err := s.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return state{}, nil
	case err != nil:
		return state{}, err
	}
	return state{true, string(b), v}, nil
}

// wantStates reports every key of want whose state differs.
func wantStates(ctx context.Context, s *storage.Store, what string, want map[string]state, bad *problems) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, err := readState(ctx, s, k)
		if err != nil {
			bad.addf("%s: Get(%q): %v", what, k, err)
			continue
		}
		if got != want[k] {
			bad.addf("%s: %q is %s, want %s", what, k, got, want[k])
		}
	}
}

func (st state) String() string {
	if !st.exists {
		return "missing"
	}
	return fmt.Sprintf("%q at %q", st.value, st.version)
}

// failedCommit checks that err is the failure of a commit whose first
// failing write is key: it matches ErrPreconditionFailed and its
// *OpError names key.
func failedCommit(what string, vs []storage.Version, err error, key string, bad *problems) {
	if err == nil {
		bad.addf("%s: the commit succeeded (versions %q), want it refused", what, vs)
		return
	}
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		bad.addf("%s: error %v, want one matching ErrPreconditionFailed", what, err)
		return
	}
	var oe *storage.OpError
	if !errors.As(err, &oe) || oe.Key != key {
		bad.addf("%s: error %v does not name the first failing write, %q", what, err, key)
	}
	if len(vs) != 0 {
		bad.addf("%s: a refused commit returned versions %q", what, vs)
	}
}

// commitAllOrNothing breaks one or two writes of a commit of six (a Put
// and a Delete of existing keys under IfMatch, a create, unconditional
// writes of existing and missing keys), at each place and in each way a
// condition can fail: nothing is written, the error names the first
// failing write, and the same commit unbroken then succeeds (so every
// version was kept).
func commitAllOrNothing(ctx context.Context, s *storage.Store, _ Capabilities) problems {
	var bad problems
	foreign, err := s.Put(ctx, "commit/aon/foreign", []byte("foreign"), storage.Condition{})
	if err != nil {
		return problems{fmt.Sprintf("Put: %v", err)}
	}
	for i, fails := range [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {1, 4}, {3, 5}, {2, 0}} {
		p := fmt.Sprintf("commit/aon/%d/", i)
		before := map[string]state{}
		for _, k := range []string{"e0", "e1", "e2"} {
			v, err := s.Put(ctx, p+k, []byte("old-"+k), storage.Condition{})
			if err != nil {
				return append(bad, fmt.Sprintf("Put: %v", err))
			}
			before[p+k] = state{true, "old-" + k, v}
		}
		for _, k := range []string{"m0", "m1", "m2"} {
			before[p+k] = state{}
		}
		writes := []storage.Write{
			{Key: p + "e0", Value: []byte("new-e0"), Cond: storage.IfMatch(before[p+"e0"].version)},
			{Key: p + "m0", Value: []byte("new-m0"), Cond: storage.IfNotExists()},
			{Key: p + "e1", Cond: storage.IfMatch(before[p+"e1"].version), Delete: true},
			{Key: p + "e2", Value: []byte("new-e2")},
			{Key: p + "m1", Value: []byte("new-m1")},
			{Key: p + "m2", Delete: true},
		}
		// What makes each write fail: a stale version, a create over a
		// key, a version of a missing key.
		breaks := []storage.Condition{storage.IfMatch(foreign), storage.IfMatch(foreign), storage.IfMatch(foreign),
			storage.IfNotExists(), storage.IfMatch(foreign), storage.IfMatch(foreign)}
		broken := slices.Clone(writes)
		for _, f := range fails {
			broken[f].Cond = breaks[f]
		}
		what := fmt.Sprintf("commit with writes %v failing", fails)
		vs, err := s.Commit(ctx, broken)
		failedCommit(what, vs, err, writes[slices.Min(fails)].Key, &bad)
		wantStates(ctx, s, what, before, &bad)
		if _, err := s.Commit(ctx, writes); err != nil {
			bad.addf("%s, then unbroken: %v (a refused commit changed a version)", what, err)
		}
	}
	return bad
}

// issued is every version a check was given, by key, with the bytes it
// was issued for (deletes are not versions).
type issued map[string]map[storage.Version]string

// add checks that v, just issued for value at key, is new for the key
// (with ContentVersions: new unless issued for these same bytes) and
// records it.
func (is issued) add(what, key, value string, v storage.Version, c Capabilities, bad *problems) {
	if v == "" {
		bad.addf("%s: %q got an empty version", what, key)
		return
	}
	if old, ok := is[key][v]; ok && !(c.ContentVersions && old == value) {
		bad.addf("%s: %q got version %q again (issued before for %q, now for %q)", what, key, v, old, value)
	}
	if is[key] == nil {
		is[key] = map[storage.Version]string{}
	}
	is[key][v] = value
}

// versionChecker makes commits and single writes for commitVersions,
// checking each version it is given and recording it.
type versionChecker struct {
	ctx context.Context
	s   *storage.Store
	c   Capabilities
	is  issued
	bad problems
}

// commit commits ws and checks the versions: one per write, a Delete's
// empty, the others new for their keys. nil when the commit failed.
func (vc *versionChecker) commit(what string, ws ...storage.Write) []storage.Version {
	vs, err := vc.s.Commit(vc.ctx, ws)
	if err != nil {
		vc.bad.addf("%s: %v", what, err)
		return nil
	}
	if len(vs) != len(ws) {
		vc.bad.addf("%s: %d versions for %d writes", what, len(vs), len(ws))
		return nil
	}
	for i, w := range ws {
		switch {
		case w.Delete && vs[i] != "":
			vc.bad.addf("%s: the Delete of %q returned version %q, want none", what, w.Key, vs[i])
		case !w.Delete:
			vc.is.add(what, w.Key, string(w.Value), vs[i], vc.c, &vc.bad)
		}
	}
	return vs
}

// single is a single Put, its version checked and recorded.
func (vc *versionChecker) single(what, key, value string, cond storage.Condition) storage.Version {
	v, err := vc.s.Put(vc.ctx, key, []byte(value), cond)
	if err != nil {
		vc.bad.addf("%s: %v", what, err)
		return ""
	}
	vc.is.add(what, key, value, v, vc.c, &vc.bad)
	return v
}

// stale checks that every version but cur issued for key fails, in a
// commit and in a single write.
func (vc *versionChecker) stale(what, key string, cur storage.Version) {
	for v := range vc.is[key] {
		if v == cur {
			continue
		}
		vs, err := vc.s.Commit(vc.ctx, []storage.Write{{Key: key, Value: []byte("stale"), Cond: storage.IfMatch(v)}})
		failedCommit(what+": a commit IfMatch(an older version)", vs, err, key, &vc.bad)
		if _, err := vc.s.Put(vc.ctx, key, []byte("stale"), storage.IfMatch(v)); !errors.Is(err, storage.ErrPreconditionFailed) {
			vc.bad.addf("%s: Put IfMatch(the older version %q) of %q: %v, want ErrPreconditionFailed", what, v, key, err)
		}
	}
}

// commitVersions checks the versions of commits: one per write in order,
// a Delete's empty, each new for its key across rewrites of the same
// bytes and across deletes and re-creates inside and outside commits; a
// commit's version is the one Get reads and IfMatch accepts, and every
// older one fails, in a commit and in a single write.
func commitVersions(ctx context.Context, s *storage.Store, c Capabilities) problems {
	vc := &versionChecker{ctx: ctx, s: s, c: c, is: issued{}}
	const a, b, gone = "commit/ver/a", "commit/ver/b", "commit/ver/gone"
	vs := vc.commit("create two, delete a missing key",
		storage.Write{Key: a, Value: []byte("a1"), Cond: storage.IfNotExists()},
		storage.Write{Key: b, Value: []byte("b1"), Cond: storage.IfNotExists()},
		storage.Write{Key: gone, Delete: true})
	if vs == nil {
		return vc.bad
	}
	wantStates(ctx, s, "after a commit", map[string]state{a: {true, "a1", vs[0]}, b: {true, "b1", vs[1]}, gone: {}}, &vc.bad)
	va := vc.single("a single Put IfMatch(a commit's version)", a, "a2", storage.IfMatch(vs[0]))
	// The same bytes again, in a commit: new versions all the same.
	if vs = vc.commit("rewrite the same bytes", storage.Write{Key: a, Value: []byte("a2"), Cond: storage.IfMatch(va)},
		storage.Write{Key: b, Value: []byte("b1"), Cond: storage.IfMatch(vs[1])}); vs == nil {
		return vc.bad
	}
	vc.stale("after identical rewrites", a, vs[0])
	// Deleted and re-created with the bytes of before: in one commit after
	// another, inside then outside, outside then inside.
	if vs = vc.commit("delete in a commit", storage.Write{Key: a, Cond: storage.IfMatch(vs[0]), Delete: true},
		storage.Write{Key: b, Cond: storage.IfMatch(vs[1]), Delete: true}); vs == nil {
		return vc.bad
	}
	if vs = vc.commit("re-create in a commit", storage.Write{Key: a, Value: []byte("a1"), Cond: storage.IfNotExists()},
		storage.Write{Key: b, Value: []byte("b1"), Cond: storage.IfNotExists()}); vs == nil {
		return vc.bad
	}
	vc.stale("after a delete and a re-create in commits", a, vs[0])
	vc.stale("after a delete and a re-create in commits", b, vs[1])
	if err := s.Delete(ctx, a, storage.IfMatch(vs[0])); err != nil {
		vc.bad.addf("a single Delete IfMatch(a commit's version): %v", err)
	}
	if vs = vc.commit("re-create in a commit after a single Delete", storage.Write{Key: a, Value: []byte("a1"), Cond: storage.IfNotExists()}); vs == nil {
		return vc.bad
	}
	vc.stale("after a single delete and a re-create in a commit", a, vs[0])
	if vs = vc.commit("delete in a commit", storage.Write{Key: a, Cond: storage.IfMatch(vs[0]), Delete: true}); vs == nil {
		return vc.bad
	}
	v := vc.single("a single re-create after a Delete in a commit", a, "a1", storage.IfNotExists())
	vc.stale("after a delete in a commit and a single re-create", a, v)
	return vc.bad
}

// commitMixed applies Puts and Deletes of existing and missing keys in one
// commit and checks each key and the listing after it.
func commitMixed(ctx context.Context, s *storage.Store, _ Capabilities) problems {
	var bad problems
	const p = "commit/mix/"
	vx, err1 := s.Put(ctx, p+"x", []byte("x1"), storage.Condition{})
	vy, err2 := s.Put(ctx, p+"y", []byte("y1"), storage.Condition{})
	_, err3 := s.Put(ctx, p+"u", []byte("u1"), storage.Condition{})
	if err := errors.Join(err1, err2, err3); err != nil {
		return problems{err.Error()}
	}
	vs, err := s.Commit(ctx, []storage.Write{
		{Key: p + "x", Cond: storage.IfMatch(vx), Delete: true},
		{Key: p + "y", Value: []byte("y2"), Cond: storage.IfMatch(vy)},
		{Key: p + "z", Value: []byte("z1"), Cond: storage.IfNotExists()},
		{Key: p + "w", Delete: true}, // missing: an unconditional Delete succeeds
		{Key: p + "u", Delete: true},
		{Key: p + "v", Value: nil},
	})
	if err != nil {
		return problems{fmt.Sprintf("commit: %v", err)}
	}
	if len(vs) != 6 || vs[0] != "" || vs[3] != "" || vs[4] != "" || vs[1] == "" || vs[2] == "" || vs[5] == "" {
		return problems{fmt.Sprintf("versions %q, want 6 with those of the Deletes (1st, 4th, 5th) empty", vs)}
	}
	wantStates(ctx, s, "after a mixed commit", map[string]state{
		p + "x": {}, p + "y": {true, "y2", vs[1]}, p + "z": {true, "z1", vs[2]}, p + "w": {}, p + "u": {}, p + "v": {true, "", vs[5]},
	}, &bad)
	got, err := collect(s.List(ctx, p))
	if err != nil || !slices.Equal(got, []string{p + "v", p + "y", p + "z"}) {
		bad.addf("List after a mixed commit = %q, %v; want v, y, z", got, err)
	}
	return bad
}

// commitCreateRace: round after round, 8 commits race, each creating its
// own key and one key all of them create: exactly one wins, its writes
// both land, and each loser's writes none, its error naming the shared key.
func commitCreateRace(ctx context.Context, s *storage.Store, _ Capabilities) problems {
	const n, rounds = 8, 10
	var bad problems
	for r := range rounds {
		shared := fmt.Sprintf("commit/race/%d/shared", r)
		own := func(i int) string { return fmt.Sprintf("commit/race/%d/own-%d", r, i) }
		var errs [n]error
		var vers [n][]storage.Version
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				vers[i], errs[i] = s.Commit(ctx, []storage.Write{
					{Key: own(i), Value: []byte("own"), Cond: storage.IfNotExists()},
					{Key: shared, Value: []byte("writer-" + strconv.Itoa(i)), Cond: storage.IfNotExists()},
				})
			})
		}
		close(start)
		wg.Wait()
		winners := 0
		want := map[string]state{}
		for i := range n {
			if errs[i] == nil && len(vers[i]) == 2 {
				winners++
				want[own(i)] = state{true, "own", vers[i][0]}
				want[shared] = state{true, "writer-" + strconv.Itoa(i), vers[i][1]}
				continue
			}
			failedCommit(fmt.Sprintf("round %d, losing commit %d", r, i), vers[i], errs[i], shared, &bad)
			want[own(i)] = state{}
		}
		if winners != 1 {
			bad.addf("round %d: %d of %d racing commits creating one key won, want exactly 1", r, winners, n)
			continue
		}
		wantStates(ctx, s, fmt.Sprintf("round %d", r), want, &bad)
	}
	return bad
}

// commitCASRace: 4 goroutines add 1 to a counter 25 times each, each
// addition a commit of the counter's compare-and-swap and the create of a
// key for the new count: the counter ends at 100 after exactly 100 won
// commits, and the keys of counts 1 to 100 exist, each once, no other.
func commitCASRace(ctx context.Context, s *storage.Store, _ Capabilities) problems {
	const goroutines, increments = 4, 25
	const key, logp = "commit/cas/counter", "commit/cas/log/"
	if _, err := s.Put(ctx, key, []byte("0"), storage.IfNotExists()); err != nil {
		return problems{err.Error()}
	}
	var wins atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for range goroutines {
		wg.Go(func() {
			for done, tries := 0, 0; done < increments; tries++ {
				if tries == 100*increments {
					errc <- fmt.Errorf("%d tries made %d of %d additions", tries, done, increments)
					return
				}
				b, v, err := s.Get(ctx, key)
				if err != nil {
					errc <- err
					return
				}
				n, err := strconv.Atoi(string(b))
				if err != nil {
					errc <- fmt.Errorf("counter holds %q", b)
					return
				}
				_, err = s.Commit(ctx, []storage.Write{
					{Key: fmt.Sprintf("%s%04d", logp, n+1), Value: b, Cond: storage.IfNotExists()},
					{Key: key, Value: []byte(strconv.Itoa(n + 1)), Cond: storage.IfMatch(v)},
				})
				switch {
				case err == nil:
					done++
					wins.Add(1)
				case !errors.Is(err, storage.ErrPreconditionFailed):
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	var bad problems
	for err := range errc {
		bad.addf("%v", err)
	}
	if len(bad) > 0 {
		return bad
	}
	const total = goroutines * increments
	b, _, err := s.Get(ctx, key)
	if err != nil || string(b) != strconv.Itoa(total) || wins.Load() != total {
		bad.addf("counter = %q (%v) after %d won commits, want %d", b, err, wins.Load(), total)
	}
	got, err := collect(s.List(ctx, logp))
	want := make([]string, total)
	for i := range want {
		want[i] = fmt.Sprintf("%s%04d", logp, i+1)
	}
	if err != nil || !slices.Equal(got, want) {
		bad.addf("the keys created with the counts: %d (%v), want %d, one per count from 1", len(got), err, total)
	}
	return bad
}

// visKeys is how many keys each commit of commitAtomicVisibility writes: a
// driver that applies a commit's writes one at a time leaves visKeys-1
// gaps per commit for a reader to fall into. It makes visCommits commits
// at least, for visFor at least, and until its readers have read
// visOverlaps passes during a commit.
const visKeys, visCommits, visOverlaps = 12, 50, 200

// visFor is the least time commitAtomicVisibility commits for.
const visFor = 200 * time.Millisecond

// visMax bounds the time commitAtomicVisibility commits for, when its
// readers are starved.
const visMax = 30 * time.Second

// visibility is one run of commitAtomicVisibility.
type visibility struct {
	ctx  context.Context
	s    *storage.Store
	keys []string

	began, ended atomic.Int64 // commits begun and ended
	overlaps     atomic.Int64 // passes that ran while a commit did
	done, failed atomic.Bool

	mu   sync.Mutex
	bad  problems
	torn int
}

// commitAtomicVisibility commits count n to visKeys keys, n = 1, 2, ...,
// while two readers read the keys one after another, one in the commits'
// order and one backwards. On a store whose commits land at one instant,
// every key holds the same count at every instant, and counts only grow,
// so each pass of a reader reads counts that never decrease; a count
// lower than one read before in the same pass is a commit seen in part.
// The commits go on until the readers have read visOverlaps passes while
// a commit ran (a pass that ends after a commit began that had not ended
// when the pass began), however the scheduler of a loaded machine shares
// its threads, so a driver that writes a commit's keys one at a time
// fails nearly always.
func commitAtomicVisibility(ctx context.Context, s *storage.Store, _ Capabilities) problems {
	v := &visibility{ctx: ctx, s: s, keys: make([]string, visKeys)}
	for i := range v.keys {
		v.keys[i] = fmt.Sprintf("commit/vis/%02d", i)
	}
	vers, err := v.write(0, nil)
	if err != nil {
		return problems{fmt.Sprintf("commit: %v", err)}
	}
	var wg, started sync.WaitGroup
	for _, backwards := range []bool{false, true} {
		order := slices.Clone(v.keys)
		if backwards {
			slices.Reverse(order)
		}
		started.Add(1)
		wg.Go(func() { v.read(order, started.Done) })
	}
	started.Wait() // the readers read before the first commit
	begin := time.Now()
	for n := 1; err == nil && !v.failed.Load(); n++ {
		if n > visCommits && v.overlaps.Load() >= visOverlaps && time.Since(begin) >= visFor {
			break
		}
		if time.Since(begin) > visMax {
			v.mu.Lock()
			v.bad.addf("%d commits in %s ran while the readers read only %d passes: too few to tell", n-1, visMax, v.overlaps.Load())
			v.mu.Unlock()
			break
		}
		vers, err = v.write(n, vers)
	}
	v.done.Store(true)
	wg.Wait()
	if err != nil {
		v.bad.addf("commit: %v", err)
	}
	if v.torn > 3 {
		v.bad.addf("%d reads in all saw a commit in part (%d passes during commits)", v.torn, v.overlaps.Load())
	}
	return v.bad
}

// write commits count n to every key, at vers (nil: creating them).
func (v *visibility) write(n int, vers []storage.Version) ([]storage.Version, error) {
	ws := make([]storage.Write, len(v.keys))
	for i, k := range v.keys {
		ws[i] = storage.Write{Key: k, Value: []byte(strconv.Itoa(n)), Cond: storage.IfNotExists()}
		if vers != nil {
			ws[i].Cond = storage.IfMatch(vers[i])
		}
	}
	v.began.Add(1)
	defer v.ended.Add(1)
	return v.s.Commit(v.ctx, ws)
}

// read reads the keys in order, pass after pass, until done, checking that
// no pass reads a count lower than one it read before; started is called
// once, after the first pass (or the failure that ends it).
func (v *visibility) read(order []string, started func()) {
	first := true
	defer func() {
		if first {
			started()
		}
	}()
	// Every other pass reads the first and the last key alone: two reads
	// close together fall inside one commit's writes more often than a
	// whole pass does.
	pair := []string{order[0], order[len(order)-1]}
	for pass := 0; !v.done.Load(); pass++ {
		ended := v.ended.Load()
		last, lastKey := -1, ""
		keys := order
		if pass%2 == 1 {
			keys = pair
		}
		for _, k := range keys {
			b, _, err := v.s.Get(v.ctx, k)
			n, aerr := strconv.Atoi(string(b))
			if err != nil || aerr != nil {
				v.mu.Lock()
				v.bad.addf("Get(%q) = %q, %v", k, b, err)
				v.mu.Unlock()
				v.failed.Store(true)
				return
			}
			if n < last {
				v.mu.Lock()
				if v.torn++; v.torn <= 3 {
					v.bad.addf("a commit seen in part: %q read %d after %q read %d", k, n, lastKey, last)
				}
				v.mu.Unlock()
			}
			last, lastKey = max(last, n), k
		}
		if v.began.Load() > ended {
			v.overlaps.Add(1)
		}
		if first {
			first = false
			started()
		}
	}
}

// commitMax commits MaxCommit creates: all land.
func commitMax(ctx context.Context, s *storage.Store, _ Capabilities) problems {
	ws := make([]storage.Write, storage.MaxCommit)
	want := make([]string, len(ws))
	for i := range ws {
		want[i] = fmt.Sprintf("commit/max/%04d", i)
		ws[i] = storage.Write{Key: want[i], Value: []byte(want[i]), Cond: storage.IfNotExists()}
	}
	vs, err := s.Commit(ctx, ws)
	if err != nil || len(vs) != len(ws) {
		return problems{fmt.Sprintf("a commit of MaxCommit (%d) writes: %d versions, %v", len(ws), len(vs), err)}
	}
	got, err := collect(s.List(ctx, "commit/max/"))
	if err != nil || !slices.Equal(got, want) {
		return problems{fmt.Sprintf("after a commit of MaxCommit creates, %d keys listed (%v), want %d", len(got), err, len(want))}
	}
	return nil
}

// commitWatch checks that a commit signals the watchers of every key it
// writes, on drivers that are also Watchers.
func commitWatch(t *testing.T, s *storage.Store) {
	if _, ok := s.Unwrap().(driver.Watcher); !ok {
		t.Skipf("%T does not implement driver.Watcher", s.Unwrap())
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	probe, err := s.Watch(ctx, "commit/")
	cancel()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%T cannot watch here: %v", s.Unwrap(), err)
	}
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	wantClosed(t, probe)
	a, b, c := mustWatch(t, s, "commit/w/a/"), mustWatch(t, s, "commit/w/b/"), mustWatch(t, s, "commit/w/c/")
	vs, err := s.Commit(ctxT(t), []storage.Write{
		{Key: "commit/w/a/1", Value: []byte("1"), Cond: storage.IfNotExists()},
		{Key: "commit/w/b/1", Value: []byte("1"), Cond: storage.IfNotExists()},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantSignal(t, a, "the first key of a commit")
	wantSignal(t, b, "the second key of a commit")
	if _, err := s.Commit(ctxT(t), []storage.Write{
		{Key: "commit/w/b/1", Cond: storage.IfMatch(vs[1]), Delete: true},
		{Key: "commit/w/c/1", Value: []byte("1"), Cond: storage.IfNotExists()},
	}); err != nil {
		t.Fatal(err)
	}
	wantSignal(t, b, "a Delete in a commit")
	wantSignal(t, c, "a Put after a Delete in a commit")
}

// commitSpy counts the commits that reach the driver under test.
type commitSpy struct {
	driver.Store
	commits atomic.Int64
}

func (c *commitSpy) Commit(ctx context.Context, ws []driver.Write) ([]driver.Version, error) {
	c.commits.Add(1)
	return c.Store.(driver.Committer).Commit(ctx, ws)
}

func (c *commitSpy) Unwrap() driver.Store { return c.Store }

// commitRefused checks that the portable layer refuses a malformed commit
// (none or too many writes, a key twice, an invalid key, a condition a
// write cannot have, a done context) before the driver sees it, so that
// nothing is written.
func commitRefused(t *testing.T, s *storage.Store) {
	spy := &commitSpy{Store: s.Unwrap()}
	ss := storage.New(spy)
	put := func(k string) storage.Write { return storage.Write{Key: "commit/refused/" + k, Value: []byte(k)} }
	tooMany := make([]storage.Write, storage.MaxCommit+1)
	for i := range tooMany {
		tooMany[i] = put(strconv.Itoa(i))
	}
	done, cancel := context.WithCancel(ctxT(t))
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		writes []storage.Write
		want   error
	}{
		{"no writes", ctxT(t), nil, storage.ErrInvalidCondition},
		{"MaxCommit+1 writes", ctxT(t), tooMany, storage.ErrInvalidCondition},
		{"a key twice", ctxT(t), []storage.Write{put("a"), put("b"), put("a")}, storage.ErrInvalidCondition},
		{"an invalid key", ctxT(t), []storage.Write{put("a"), {Key: "commit//bad", Value: []byte("x")}}, storage.ErrInvalidKey},
		{"IfNotExists on a Delete", ctxT(t), []storage.Write{put("a"), {Key: "commit/refused/b", Cond: storage.IfNotExists(), Delete: true}}, storage.ErrInvalidCondition},
		{"IfMatch of no version", ctxT(t), []storage.Write{put("a"), {Key: "commit/refused/b", Cond: storage.IfMatch("")}}, storage.ErrInvalidCondition},
		{"a done context", done, []storage.Write{put("a")}, context.Canceled},
	} {
		vs, err := ss.Commit(tc.ctx, tc.writes)
		if !errors.Is(err, tc.want) || vs != nil {
			t.Errorf("%s: Commit = %q, %v; want an error matching %v", tc.name, vs, err, tc.want)
		}
	}
	if n := spy.commits.Load(); n != 0 {
		t.Errorf("%d malformed commits reached the driver", n)
	}
	if got := listAll(t, s, "commit/refused/"); len(got) != 0 {
		t.Errorf("malformed commits wrote %q", got)
	}
	// The spy sees a commit that is well formed: the count above can fail.
	if _, err := ss.Commit(ctxT(t), []storage.Write{put("a")}); err != nil || spy.commits.Load() != 1 {
		t.Errorf("a well-formed commit: %v, %d commits reached the driver, want 1", err, spy.commits.Load())
	}
}
