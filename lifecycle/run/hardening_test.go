package run_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Tests of issue 18's run defects (3 to 8). Each failed before its fix.

// raceQuarantine changes a record (to then) the first time a quarantine
// copy of it is written, as a repair or another writer racing the
// quarantine would: the quarantine's compare-and-swap then fails.
type raceQuarantine struct {
	driver.Store
	key  string
	then func() []byte
	once sync.Once
}

func (s *raceQuarantine) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if strings.HasPrefix(key, records.QuarantinePrefix+s.key+"/") {
		s.once.Do(func() {
			if _, err := s.Store.Put(ctx, s.key, s.then(), storage.Condition{}); err != nil {
				panic(err)
			}
		})
	}
	return s.Store.Put(ctx, key, v, c)
}

// TestStatusPoisonChangedDuringQuarantine (defect 6): a damaged
// status.json that changes between the read and its quarantine gives Status
// and Wait what the record is now (a repaired run, or a quarantine of the
// new damage), never a raw precondition failure (INTERNAL_ERROR).
func TestStatusPoisonChangedDuringQuarantine(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name           string
		repaired, wait bool
	}{{"repaired/Status", true, false}, {"damaged again/Status", false, false}, {"damaged again/Wait", false, true}} {
		{
			wait := tt.wait
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				mem := memstore.New()
				agent := run.Agent{Slug: "racy", Steps: []run.Step{okStep("one")}}
				// No Run: nothing but the reads below touches the run.
				r, err := run.NewRunner(run.Config{Store: mem, Owner: "a", Logger: discard()}, agent)
				if err != nil {
					t.Fatal(err)
				}
				res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug})
				if err != nil {
					t.Fatal(err)
				}
				key, _ := layout.RunStatusKey(agent.Slug, res.RunID)
				good, _, err := mem.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mem.Put(ctx, key, []byte("{not json"), storage.Condition{}); err != nil {
					t.Fatal(err)
				}
				rs := &raceQuarantine{Store: mem, key: key, then: func() []byte {
					if tt.repaired {
						return good
					}
					return []byte("{still not json")
				}}
				r2, err := run.NewRunner(run.Config{Store: storage.New(rs), Owner: "b", Logger: discard()}, agent)
				if err != nil {
					t.Fatal(err)
				}
				var st lifecycle.RunStatus
				if wait {
					st, err = r2.Wait(ctx, res.RunID)
				} else {
					st, err = r2.Status(ctx, res.RunID)
				}
				if tt.repaired {
					if err != nil || st.RunID != res.RunID {
						t.Fatalf("Status of the repaired run: %+v, %v", st, err)
					}
					return
				}
				var qe *lifecycle.QuarantinedError
				if !errors.As(err, &qe) || lifecycle.ErrorCode(err) != codes.RecordQuarantined {
					t.Fatalf("got %v (code %s), want a *QuarantinedError", err, lifecycle.ErrorCode(err))
				}
			})
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestCancelRacesParkingStep (defect 8): an acknowledged cancel always wins
// at the run's next move. Cancel races the end of a step that parks the run
// at an approval gate, 1,000 times: every run ends cancelled, none waits at
// awaiting_approval with its cancel request unanswered.
func TestCancelRacesParkingStep(t *testing.T) {
	t.Parallel()
	const runs, workers = 1000, 25
	g := newRig(t, nil)
	var gates sync.Map // run id → chan struct{}: closed to end its step
	gate := func(id string) chan struct{} {
		c, _ := gates.LoadOrStore(id, make(chan struct{}))
		return c.(chan struct{})
	}
	var started sync.Map // run id → chan struct{}: closed when its step runs
	startedOf := func(id string) chan struct{} {
		c, _ := started.LoadOrStore(id, make(chan struct{}))
		return c.(chan struct{})
	}
	agent := run.Agent{Slug: "gated", Machine: lifecycle.MachineApproval, Concurrency: workers,
		Steps: []run.Step{{Name: "ask", Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			close(startedOf(in.RunID))
			<-gate(in.RunID) // the step ends when released, canceled or not
			return run.StepOutput{Await: &run.Await{Approval: "publish"}}, nil
		}}, okStep("publish")}}
	r, _ := g.runner("a", nil, agent)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range runs / workers {
				res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug})
				if err != nil {
					errs <- err
					return
				}
				id := res.RunID
				<-startedOf(id)
				var ack lifecycle.RunStatus
				var cerr error
				var race sync.WaitGroup
				race.Add(2)
				go func() {
					defer race.Done()
					ack, cerr = r.Cancel(ctx, id, lifecycle.ActorGateway, run.CancelRequest{Reason: "race"})
				}()
				go func() { defer race.Done(); close(gate(id)) }()
				race.Wait()
				if cerr != nil || !ack.CancelRequested {
					errs <- fmt.Errorf("worker %d: Cancel %s: %+v, %v", w, id, ack, cerr)
					continue
				}
				wctx, cancel := context.WithTimeout(ctx, failAfter)
				st, err := r.Wait(wctx, id)
				cancel()
				if err != nil || st.Status != string(machine.ApprovalCancelled) {
					errs <- fmt.Errorf("run %s after an acknowledged cancel: %s, %v", id, st.Status, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d runs lost their cancel", n, runs)
	}
}

// errDead is every call of a crashed process's store.
var errDead = errors.New("the process is dead")

// crashAt is the store of a process that is killed (kill -9) just before
// its nth write: that write and every call after it never happen.
type crashAt struct {
	driver.Store
	n      int
	mu     sync.Mutex
	writes int
}

func (s *crashAt) dead(write bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if write && s.writes < s.n {
		s.writes++
	}
	return s.writes >= s.n
}

func (s *crashAt) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if s.dead(false) {
		return nil, "", errDead
	}
	return s.Store.Get(ctx, key)
}

func (s *crashAt) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if s.dead(true) {
		return "", errDead
	}
	return s.Store.Put(ctx, key, v, c)
}

func (s *crashAt) Delete(ctx context.Context, key string, c storage.Condition) error {
	if s.dead(true) {
		return errDead
	}
	return s.Store.Delete(ctx, key, c)
}

// TestSubmitKilledAtEachWrite (defect 3): a process killed at any write of
// Submit leaves no run half-made: a new Runner on the same store ends every
// run the dead one began (or finds none), and then no active entry, index
// entry or run folder is left without a terminal status.json.
func TestSubmitKilledAtEachWrite(t *testing.T) {
	t.Parallel()
	agent := run.Agent{Slug: "crashy", Steps: []run.Step{okStep("one")}}
	for _, tt := range []struct {
		name string
		req  lifecycle.SubmitRequest
	}{
		{"plain", lifecycle.SubmitRequest{AgentSlug: agent.Slug}},
		{"input", lifecycle.SubmitRequest{AgentSlug: agent.Slug, Input: json.RawMessage(`{"x":1}`)}},
		{"idempotent", lifecycle.SubmitRequest{AgentSlug: agent.Slug, Input: json.RawMessage(`{"x":1}`), IdempotencyKey: "api:c:r1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for n := 1; ; n++ {
				g := newRig(t, nil)
				crash := &crashAt{Store: g.store, n: n}
				dead, err := run.NewRunner(run.Config{Store: storage.New(crash), Owner: "dead", Clock: g.clock, Logger: discard(),
					PollTimeout: time.Second}, agent)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_, serr := dead.Submit(ctx, tt.req)
				cancel()
				if serr == nil {
					if n == 1 {
						t.Fatal("Submit wrote nothing")
					}
					return // past its last write: every write point was tried
				}
				_, stop := g.runner("b", nil, agent)
				g.advanceUntil(10*time.Second, 10*time.Minute, func() bool { return halfMade(t, g.store) == "" },
					func() string { return fmt.Sprintf("killed before write %d: %s", n, halfMade(t, g.store)) })
				stop()
			}
		})
	}
}

// halfMade names a run the store holds half-made or not ended: an active
// entry, an index entry or a run folder whose status.json is missing or not
// terminal. "" means none.
func halfMade(t *testing.T, s *storage.Store) string {
	ctx := context.Background()
	status := map[string]string{} // run id → status
	folders := map[string]bool{}
	for key, err := range s.List(ctx, "agents/") {
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.Split(key, "/") // agents/{slug}/runs/{id}/...
		if len(parts) < 5 || parts[2] != "runs" {
			continue
		}
		folders[parts[3]] = true
		if parts[4] == "status.json" && len(parts) == 5 {
			var st lifecycle.RunStatus
			readJSON(t, s, key, &st)
			status[parts[3]] = st.Status
		}
	}
	terminal := func(id string) bool {
		st := status[id]
		return st == "completed" || st == "failed"
	}
	for id := range folders {
		if !terminal(id) {
			return fmt.Sprintf("run folder %s with status %q", id, status[id])
		}
	}
	for _, prefix := range []string{layout.RunActivePrefix, layout.RunIndexPrefix} {
		for key, err := range s.List(ctx, prefix) {
			if err != nil {
				t.Fatal(err)
			}
			id := key[strings.LastIndex(key, "/")+1:]
			id = strings.TrimSuffix(id, ".json")
			if !terminal(id) {
				return fmt.Sprintf("%s with status %q", key, status[id])
			}
		}
	}
	return ""
}

// flakyAudit fails the first write of every third audit object, as a store
// under load does (a deadline exceeded); every other call goes through.
type flakyAudit struct {
	driver.Store
	mu     sync.Mutex
	seen   int
	failed map[string]bool
}

func (s *flakyAudit) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if strings.HasPrefix(key, "audit/") {
		s.mu.Lock()
		fail := false
		if _, ok := s.failed[key]; !ok {
			s.seen++
			fail = s.seen%3 == 0
			s.failed[key] = fail
		}
		s.mu.Unlock()
		if fail {
			return "", fmt.Errorf("audit write refused: %w", context.DeadlineExceeded)
		}
	}
	return s.Store.Put(ctx, key, v, c)
}

// TestBurstEveryWriteAudited (defect 5): under a burst whose store fails a
// third of the audit writes, every status write still has its audit event
// once the runs end: the next writer or a poll writes the missing ones.
// A run's status.json counts its writes (version), the audit log must hold
// as many events of the run.
func TestBurstEveryWriteAudited(t *testing.T) {
	t.Parallel()
	const runs = 200
	g := newRig(t, nil)
	flaky := &flakyAudit{Store: g.tracked(), failed: map[string]bool{}}
	agent := run.Agent{Slug: "burst", Concurrency: 10, Steps: []run.Step{okStep("one"), okStep("two")}}
	r, _ := g.around(storage.New(flaky)).runner("a", nil, agent)
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = submit(t, r, agent.Slug)
	}
	active := func() int {
		n := 0
		for range g.store.List(context.Background(), layout.RunActivePrefix) {
			n++
		}
		return n
	}
	g.advanceUntil(time.Second, 10*time.Minute, func() bool { return active() == 0 },
		func() string { return fmt.Sprintf("%d runs still active", active()) })
	ctx := context.Background()
	events := map[string]int{}
	for ev, err := range records.ReadAuditDay(ctx, g.store, epoch0) {
		if err != nil {
			t.Fatal(err)
		}
		events[ev.RunID]++
	}
	missing := 0
	for _, id := range ids {
		key, _ := layout.RunStatusKey(agent.Slug, id)
		var st lifecycle.RunStatus
		readJSON(t, g.store, key, &st)
		if st.Status != "completed" {
			t.Errorf("run %s ended %s", id, st.Status)
		}
		if int64(events[id]) != st.Version {
			missing++
			if missing <= 5 {
				t.Errorf("run %s: %d status writes, %d audit events", id, st.Version, events[id])
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d runs miss audit events", missing, runs)
	}
	flaky.mu.Lock()
	defer flaky.mu.Unlock()
	if flaky.seen < runs {
		t.Fatalf("only %d audit writes seen", flaky.seen)
	}
}

// deadlineAfterStatus ends the request's context the moment a status.json
// write lands, and refuses an audit write made under an ended context, as
// a network store does.
type deadlineAfterStatus struct {
	driver.Store
	end context.CancelFunc
}

func (s *deadlineAfterStatus) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	if strings.HasPrefix(key, "audit/") && ctx.Err() != nil {
		return "", ctx.Err()
	}
	ver, err := s.Store.Put(ctx, key, v, c)
	if err == nil && strings.HasSuffix(key, "/status.json") {
		s.end()
	}
	return ver, err
}

// TestAuditOutlivesRequestDeadline (defect 5): the audit event of a write
// is written even when the request that made the write runs out of time
// right after it: the audit write has a budget of its own.
func TestAuditOutlivesRequestDeadline(t *testing.T) {
	t.Parallel()
	mem := memstore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := run.Agent{Slug: "hurried", Steps: []run.Step{okStep("one")}}
	r, err := run.NewRunner(run.Config{Store: storage.New(&deadlineAfterStatus{Store: mem, end: cancel}), Owner: "a", Logger: discard()}, agent)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: agent.Slug})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ev, err := range records.ReadAuditDay(context.Background(), mem, time.Now()) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.RunID == res.RunID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("the run's creation has %d audit events, want 1", n)
	}
}

// cancelAfterClaim runs hook once, inside the store call of the first
// status write that moves a run to running (the claim), after it landed
// and before the runner hears back: a cancel that lands between a
// runner's claim and the start of its execution.
type cancelAfterClaim struct {
	driver.Store
	hook func(runID string)
	once sync.Once
}

func (s *cancelAfterClaim) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	ver, err := s.Store.Put(ctx, key, v, c)
	if err == nil && strings.HasSuffix(key, "/status.json") && strings.Contains(string(v), `"status":"running"`) {
		runID := strings.Split(key, "/")[3] // agents/{slug}/runs/{runId}/status.json
		s.once.Do(func() { s.hook(runID) })
	}
	return ver, err
}

// TestCancelBetweenClaimAndStart: a cancel acknowledged after the runner's
// claim wrote running but before the execution was registered stops the
// run at once, not at its next heartbeat (30 s later): the fake clock does
// not move. It failed before the execution was registered ahead of its
// claim (the cancel found nothing to stop, and the claim's snapshot had no
// cancel request).
func TestCancelBetweenClaimAndStart(t *testing.T) {
	t.Parallel()
	base := newRig(t, nil)
	s := &cancelAfterClaim{Store: base.tracked()}
	g := base.around(storage.New(s))
	slow := run.Agent{Slug: "slow", Machine: lifecycle.MachineCancelable, Steps: []run.Step{{Name: "work",
		Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
			<-ctx.Done()
			return run.StepOutput{}, ctx.Err()
		}}}}
	r, _ := g.runner("a", nil, slow)
	ctx := context.Background()
	acked := make(chan error, 1)
	s.hook = func(id string) {
		// In its own goroutine, as an API request would be; the claim's
		// store call returns once the cancel is acknowledged.
		go func() {
			_, err := r.Cancel(ctx, id, lifecycle.ActorGateway, run.CancelRequest{Reason: "changed my mind"})
			acked <- err
		}()
		if err := <-acked; err != nil {
			t.Errorf("Cancel: %v", err)
		}
	}
	res, err := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: slow.Slug})
	if err != nil {
		t.Fatal(err)
	}
	st := g.waitFor(r, res.RunID, time.Second, 5*time.Second, func(st lifecycle.RunStatus) bool { return st.Status == string(machine.CancelableCanceled) })
	if st.CancelReason != "changed my mind" {
		t.Errorf("cancel_reason %q", st.CancelReason)
	}
}
