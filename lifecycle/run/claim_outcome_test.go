package run_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// loseClaimAnswer lands the first write of owner's lease into a run's
// status, then answers nothing until the caller gives up, and then a
// transient error: the claim cannot tell whether its write landed, as
// when a store goes away between a write and its answer.
type loseClaimAnswer struct {
	driver.Store
	owner string
	mu    sync.Mutex
	lost  string // the run whose claim's answer was lost
}

func (s *loseClaimAnswer) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	ver, err := s.Store.Put(ctx, key, v, c)
	if err != nil || !strings.HasSuffix(key, "/status.json") || !strings.Contains(string(v), `"owner":"`+s.owner+`"`) {
		return ver, err
	}
	s.mu.Lock()
	first := s.lost == ""
	if first {
		s.lost = strings.Split(key, "/")[3] // agents/{slug}/runs/{runId}/status.json
	}
	s.mu.Unlock()
	if !first {
		return ver, err
	}
	// Held until the pass's deadline (real time), counted as the runner's
	// work: the fake clock does not move meanwhile.
	<-ctx.Done()
	return "", &storage.OpError{Op: "put", Key: key, Cause: syscall.ECONNRESET}
}

func (s *loseClaimAnswer) lostRun() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// TestClaimWhoseAnswerWasLost: a claim whose write landed but whose answer
// never came (the pass gave up) leaves the run under this runner's own
// lease with nothing executing it. The runner takes it up at its next
// poll, without counting a takeover for a plain start, instead of leaving
// it until the lease lapses 5 minutes later: the test allows 30 s of fake
// time. It failed before the runner remembered such claims (found as
// TestFaultStoreOutageMinIO's stranded run on a loaded machine).
func TestClaimWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		takeover bool // the lost claim takes over an orphan, not a queued run
	}{
		{name: "start"},
		{name: "takeover", takeover: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := newRig(t, nil)
			lossy := &loseClaimAnswer{Store: base.tracked(), owner: "b"}
			fast := func(c *run.Config) { c.PollTimeout = 300 * time.Millisecond }
			block := make(chan struct{})
			work := okStep("work")
			work.Idempotent = true // a takeover runs it again
			agent := run.Agent{Slug: "lost", Steps: []run.Step{work}}
			var runID string
			if tc.takeover {
				// Runner a starts the run and stops inside its step: the run
				// keeps a's lease until it lapses.
				started := make(chan struct{})
				held := agent
				held.Steps = []run.Step{{Name: "work", Idempotent: true, Run: func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
					close(started)
					testSelect(ctx, block)
					return run.StepOutput{}, ctx.Err()
				}}}
				a, stopA := base.runner("a", nil, held)
				runID = submit(t, a, agent.Slug)
				<-started
				stopA()
			}
			b, _ := base.around(storage.New(lossy)).runner("b", fast, agent)
			if !tc.takeover {
				runID = submit(t, b, agent.Slug)
			}
			// Before it was taken up, a run waited for its lease to lapse
			// (5 minutes) after the lost claim: allow 30 s of fake time
			// from then (the takeover's claim comes once a's lease lapsed).
			limit := 30 * time.Second
			if tc.takeover {
				limit += 5 * time.Minute
			}
			st := base.waitFor(b, runID, time.Second, limit, func(st lifecycle.RunStatus) bool {
				return st.Status == "completed"
			})
			if lossy.lostRun() != runID {
				t.Fatalf("no claim's answer was lost (lost %q, run %s)", lossy.lostRun(), runID)
			}
			wantResumes := 0
			if tc.takeover {
				wantResumes = 1
			}
			if st.ResumeCount != wantResumes {
				t.Errorf("resume_count %d, want %d", st.ResumeCount, wantResumes)
			}
		})
	}
}

// failStatusEntry refuses, once, the write of a run's entry under the
// status index of state (not a transient error: no retry lands it).
type failStatusEntry struct {
	driver.Store
	prefix string
	once   sync.Once
	failed chan struct{}
}

func (s *failStatusEntry) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	refuse := false
	if strings.HasPrefix(key, s.prefix) {
		s.once.Do(func() { refuse = true; close(s.failed) })
	}
	if refuse {
		return "", &storage.OpError{Op: "put", Key: key, Cause: fs.ErrPermission}
	}
	return s.Store.Put(ctx, key, v, c)
}

// TestFinishedRunWhoseIndexMoveFailed: a run whose status entry could not
// be moved to its terminal state keeps its active entry, so the next poll
// repairs the entry and only then cleans up: the run is listed under its
// status. Before, the active entry went at once and the run was missing
// from the status's list for good.
func TestFinishedRunWhoseIndexMoveFailed(t *testing.T) {
	t.Parallel()
	base := newRig(t, nil)
	prefix, err := layout.RunStatusIndexAgentPrefix("moved", "completed")
	if err != nil {
		t.Fatal(err)
	}
	s := &failStatusEntry{Store: base.tracked(), prefix: prefix, failed: make(chan struct{})}
	g := base.around(storage.New(s))
	agent := run.Agent{Slug: "moved", Steps: []run.Step{okStep("work")}}
	r, _ := g.runner("a", nil, agent)
	runID := submit(t, r, agent.Slug)
	g.wait(r, runID, time.Second, time.Minute)
	<-s.failed
	g.advanceUntil(time.Second, time.Minute, func() bool {
		page, err := r.ListRuns(context.Background(), run.RunQuery{Agent: agent.Slug, Status: "completed"})
		return err == nil && len(page.Runs) == 1 && page.Runs[0].RunID == runID
	}, func() string { return "the completed run is not listed under completed" })
}
