package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

const sleepJob lifecycle.JobType = "SLEEP"

// sleepers counts the jobs of a handler that sleeps d running at once,
// the most seen, and the jobs done.
type sleepers struct{ now, peak, done atomic.Int64 }

func (p *sleepers) handler(d time.Duration) jobqueue.Handler {
	return jobqueue.HandlerFunc(func(ctx context.Context, _ lifecycle.Job) (lifecycle.JobOutput, error) {
		n := p.now.Add(1)
		for m := p.peak.Load(); n > m && !p.peak.CompareAndSwap(m, n); m = p.peak.Load() {
		}
		defer p.done.Add(1)
		defer p.now.Add(-1)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return lifecycle.JobOutput{}, ctx.Err()
		}
		return lifecycle.JobOutput{Content: json.RawMessage(`{}`)}, nil
	})
}

// queueServer is a server over q1 on store, whose clients are the
// gateway's and the admin's operator.
func queueServer(t *testing.T, store *storage.Store, q *jobqueue.Queue) (gw *client.Client, admin client.Operator, frontend client.Operator) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runner, err := run.NewRunner(run.Config{Store: store, Owner: "test", Logger: log}, run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load")}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.New(httpapi.Config{Runner: runner, Queue: q, Tokens: tokens, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	as := func(tok string) *client.Client {
		return &client.Client{BaseURL: srv.URL, HTTP: srv.Client(), Token: tok}
	}
	return as("tok-gateway"), client.Operator{Client: as("tok-admin")}, client.Operator{Client: as("tok-frontend")}
}

func sleepQueue(t *testing.T, store *storage.Store, p *sleepers, tc jobqueue.TypeConfig) *jobqueue.Queue {
	t.Helper()
	tc.Handler = p.handler(200 * time.Millisecond)
	q, err := jobqueue.New(jobqueue.Config{Store: store, Logger: slog.New(slog.DiscardHandler),
		Types: map[lifecycle.JobType]jobqueue.TypeConfig{sleepJob: tc}})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// startWorkers runs a Worker of 8 slots over each queue until the test ends.
func startWorkers(t *testing.T, qs ...*jobqueue.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, q := range qs {
		w := &jobqueue.Worker{Queue: q, ID: fmt.Sprintf("w%d", i), Slots: 8, PollInterval: 20 * time.Millisecond, SweepInterval: -1}
		wg.Go(func() { _ = w.Run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func waitDone(t *testing.T, p *sleepers, want int64, within time.Duration) time.Duration {
	t.Helper()
	began := time.Now()
	for p.done.Load() < want && time.Since(began) < within {
		time.Sleep(5 * time.Millisecond)
	}
	if got := p.done.Load(); got < want {
		t.Fatalf("%d of %d jobs done within %s", got, want, within)
	}
	return time.Since(began)
}

// TestTypeSideBySideOverHTTP (issue 30): 16 jobs of 200 ms of one type,
// enqueued over HTTP, on a Worker with 8 slots run 8 at a time (about
// 0.4 s, not 3.2 s); a cap of 3 across processes holds with two Workers
// on one store.
func TestTypeSideBySideOverHTTP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		tc       jobqueue.TypeConfig
		workers  int
		jobs     int
		wantPeak int64
		within   time.Duration
	}{
		// within: well below the serial time (jobs × 200 ms), with room for
		// a loaded machine (about 0.45 s unloaded, 1.8 s at a load of 38 on
		// 2 cores under -race).
		{"one Worker of 8 slots", jobqueue.TypeConfig{}, 1, 16, 8, 2400 * time.Millisecond},
		{"two Workers capped at 3", jobqueue.TypeConfig{MaxRunningGlobal: 3}, 2, 12, 3, 0}, // a cap's peak is the cap
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store := memstore.New()
			p := &sleepers{}
			var qs []*jobqueue.Queue
			for range tt.workers {
				qs = append(qs, sleepQueue(t, store, p, tt.tc))
			}
			gw, admin, _ := queueServer(t, store, qs[0])
			for i := range tt.jobs {
				if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: fmt.Sprintf("s%02d", i), JobType: sleepJob}); err != nil {
					t.Fatal(err)
				}
			}
			startWorkers(t, qs...)
			took := waitDone(t, p, int64(tt.jobs), 20*time.Second)
			t.Logf("%d jobs of 200 ms: peak %d at once, %s", tt.jobs, p.peak.Load(), took)
			if got := p.peak.Load(); got != tt.wantPeak {
				t.Errorf("peak concurrency %d, want %d", got, tt.wantPeak)
			}
			if tt.within > 0 && took > tt.within {
				t.Errorf("took %s, want within %s", took, tt.within)
			}
			lanes, err := admin.Queues(ctx)
			if err != nil || len(lanes) != 1 || lanes[0].Queue != "default" || lanes[0].Paused {
				t.Fatalf("GET /queues: %+v, %v", lanes, err)
			}
		})
	}
}

// TestPauseOverHTTP: POST /queues/{queue}/pause stops a queue's jobs from
// starting on every Worker until POST /queues/{queue}/resume; GET /queues
// shows it; only the admin pauses, a bad name and a body are refused by
// their codes.
func TestPauseOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New()
	p := &sleepers{}
	q := sleepQueue(t, store, p, jobqueue.TypeConfig{Queue: "mail"})
	gw, admin, frontend := queueServer(t, store, q)

	if err := (client.Operator{Client: gw}).SetPaused(ctx, "mail", true); err == nil {
		t.Fatal("the gateway paused a queue")
	} else {
		apiError(t, err, http.StatusForbidden, codes.Forbidden)
	}
	apiError(t, frontend.SetPaused(ctx, "mail", true), http.StatusForbidden, codes.Forbidden)
	apiError(t, admin.SetPaused(ctx, "a.b", true), http.StatusBadRequest, codes.InvalidInput)
	req, _ := http.NewRequest(http.MethodPost, admin.Client.BaseURL+"/queues/mail/pause", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer tok-admin")
	if resp, err := admin.Client.HTTP.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a pause with a body: %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}

	if err := admin.SetPaused(ctx, "mail", true); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := gw.Enqueue(ctx, lifecycle.NewJob{JobID: fmt.Sprintf("m%d", i), JobType: sleepJob}); err != nil {
			t.Fatal(err)
		}
	}
	startWorkers(t, q)
	time.Sleep(1500 * time.Millisecond) // past every Worker's next listing of the pauses
	if got := p.done.Load() + p.now.Load(); got != 0 {
		t.Fatalf("%d jobs of the paused queue started", got)
	}
	lanes, err := admin.Queues(ctx)
	if err != nil || len(lanes) != 1 || lanes[0].Queue != "mail" || !lanes[0].Paused || lanes[0].Ready != 4 {
		t.Fatalf("GET /queues while paused: %+v, %v", lanes, err)
	}
	if err := admin.SetPaused(ctx, "mail", false); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p, 4, 10*time.Second)
	if j, err := gw.Job(ctx, "m0"); err != nil || j.Status != lifecycle.JobComplete || j.AgentSlug != "_queue.mail.SLEEP" {
		t.Fatalf("a job of the resumed queue: %s in %s, %v", j.Status, j.AgentSlug, err)
	}
}
