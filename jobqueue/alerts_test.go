package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

func rules(r jobqueue.Report) string {
	var out []string
	for _, a := range r.Alerts {
		out = append(out, a.Rule)
	}
	return strings.Join(out, ",")
}

func evaluate(t *testing.T, q *jobqueue.Queue, now time.Time) jobqueue.Report {
	t.Helper()
	r, err := q.Evaluate(context.Background(), now, jobqueue.AlertConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAlertQueuedTooLong(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storage.Store) {
		clk := clock.NewFake(t0)
		q := newQueue(t, s, clk)
		enqueue(t, q, "job-1", "agent")
		clk.Advance(5 * time.Minute)
		if r := evaluate(t, q, clk.Now()); rules(r) != "" {
			t.Fatalf("at 5 min: %v", r.Alerts)
		}
		clk.Advance(time.Second)
		r := evaluate(t, q, clk.Now())
		if rules(r) != jobqueue.RuleQueuedTooLong || fmt.Sprint(r.Alerts[0].JobIDs) != "[job-1]" ||
			r.Alerts[0].Action != "operator checks NLM Backend health" {
			t.Fatalf("after 5 min 1 s: %+v", r.Alerts)
		}
	})
}

// TestAlertDeadRate: one dead job in 51 finished is above 1 %, in 101 it
// is not.
func TestAlertDeadRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := newQueue(t, stores[0].new(t), clk, func(c *jobqueue.Config) { c.MaxAttempts = 1 })
	enqueue(t, q, "dead", "agent-dead")
	var calls atomic.Int32
	if _, err := claim(t, q, "w").Run(ctx, failing(errors.New("x"), &calls)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(15 * time.Second)
	if c := claim(t, q, "w"); c != nil {
		t.Fatal("unexpected claim")
	}
	runN := func(n, from int) {
		for i := range n {
			enqueue(t, q, fmt.Sprintf("ok-%03d", from+i), fmt.Sprintf("agent-%d", i%5))
		}
		for c := claim(t, q, "w"); c != nil; c = claim(t, q, "w") {
			if _, err := c.Run(ctx, okHandlers()); err != nil {
				t.Fatal(err)
			}
		}
	}
	runN(50, 0)
	r := evaluate(t, q, clk.Now())
	if rules(r) != jobqueue.RuleDeadRate || r.SLO.Dead7d != 1 || r.SLO.Complete7d != 50 || r.SLO.CompletionRate24h != 50.0/51 {
		t.Fatalf("1 of 51: %+v %+v", r.Alerts, r.SLO)
	}
	runN(50, 50)
	if r := evaluate(t, q, clk.Now()); rules(r) != "" || r.SLO.DeadRate7d >= 0.01 {
		t.Fatalf("1 of 101: %+v %+v", r.Alerts, r.SLO)
	}
	// Eight days later the window is empty.
	if r := evaluate(t, q, clk.Now().Add(8*24*time.Hour)); r.SLO.Dead7d+r.SLO.Complete7d != 0 || r.SLO.CompletionRate24h != 1 {
		t.Fatalf("after the window: %+v", r.SLO)
	}
}

// TestAlertStreaks: three artifact write failures in a row, or three
// context-assembly timeouts in a row, fire; a success in between resets.
func TestAlertStreaks(t *testing.T) {
	forEachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		clk := clock.NewFake(t0)
		var writeFails atomic.Int32
		fs := &flakyStore{Store: s, fails: 1 << 30, match: func(key string, _ []byte) bool {
			return strings.HasPrefix(key, "projects/") && writeFails.Add(-1) >= 0
		}}
		q := newQueue(t, fs, clk)
		run := func(id string, h jobqueue.Handlers) {
			t.Helper()
			enqueue(t, q, id, "agent-"+id)
			c := claim(t, q, "w")
			if c == nil {
				t.Fatalf("%s: no claim", id)
			}
			if _, err := c.Run(ctx, h); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Millisecond)
		}
		writeFails.Store(2)
		run("a1", okHandlers())
		run("a2", okHandlers())
		run("a3", okHandlers()) // succeeds: resets
		writeFails.Store(3)
		run("a4", okHandlers())
		run("a5", okHandlers())
		if r := evaluate(t, q, clk.Now()); rules(r) != "" {
			t.Fatalf("two in a row: %+v", r.Alerts)
		}
		run("a6", okHandlers())
		r := evaluate(t, q, clk.Now())
		if rules(r) != jobqueue.RuleArtifactWriteFailures || fmt.Sprint(r.Alerts[0].JobIDs) != "[a4 a5 a6]" {
			t.Fatalf("three in a row: %+v", r.Alerts)
		}
		timeout := okHandlers()
		timeout.AssembleContext = func(ctx context.Context, job jobqueue.Job) (json.RawMessage, error) {
			return nil, context.DeadlineExceeded
		}
		run("c1", timeout)
		run("c2", timeout)
		run("c3", timeout)
		r = evaluate(t, q, clk.Now())
		if rules(r) != jobqueue.RuleArtifactWriteFailures+","+jobqueue.RuleContextAssemblyTimeouts ||
			r.Alerts[1].Action != "operator checks Memory Backend / GitHub" {
			t.Fatalf("timeouts: %+v", r.Alerts)
		}
		run("c4", okHandlers())
		if r := evaluate(t, q, clk.Now()); rules(r) != "" {
			t.Fatalf("after successes: %+v", r.Alerts)
		}
	})
}

// TestSLOTimes: step times come from the audit log's timestamps.
func TestSLOTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	q := newQueue(t, stores[0].new(t), clk, func(c *jobqueue.Config) { c.LeaseTTL = time.Hour; c.StepTimeout = 2 * time.Hour })
	h := jobqueue.Handlers{
		AssembleContext: func(ctx context.Context, job jobqueue.Job) (json.RawMessage, error) {
			clk.Advance(2 * time.Second)
			return nil, nil
		},
		CallNotebookLM: func(ctx context.Context, job jobqueue.Job, snap json.RawMessage) (jobqueue.Output, error) {
			clk.Advance(30 * time.Second)
			return jobqueue.Output{Content: json.RawMessage(briefContent)}, nil
		},
	}
	for i := range 20 {
		enqueue(t, q, fmt.Sprintf("job-%02d", i), fmt.Sprintf("agent-%02d", i))
		clk.Advance(time.Second)
		if _, err := claim(t, q, "w").Run(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	r := evaluate(t, q, clk.Now())
	s := r.SLO
	if s.P95ContextAssembly != 2*time.Second || s.P95NLMCall != 30*time.Second || s.P95ArtifactWrite != 0 ||
		s.P95EndToEnd != 33*time.Second || s.Complete24h != 20 || s.CompletionRate24h != 1 || rules(r) != "" {
		t.Fatalf("SLO %+v alerts %v", s, r.Alerts)
	}
}
