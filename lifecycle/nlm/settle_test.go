package nlm_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/storage"
)

// A processor whose poll read a job in flight as missing removed its entry
// from the index of jobs in flight, its only pointer: the job, accepted
// elsewhere, was never processed (issue 27: a store that settles answers a
// false not-found for a moment after a disturbance).
func TestSettleJobReadMissingKeepsItsIndexEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	w := watch(memstore.New())
	fs := faultstore.New(w)
	fs.SetSettle(10*time.Second, clk.Now)
	b, _ := json.Marshal(map[string]any{"job_id": "job-s", "status": "ACCEPTED", "request": request("https://cb.example/r", "job-s")})
	for _, kv := range [][2]string{{"nlm/jobs/job-s.json", string(b)}, {"nlm/active/job-s", `{}`}} {
		if _, err := w.Put(ctx, kv[0], []byte(kv[1]), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	fs.Match(func(k string) bool { return k == "nlm/jobs/job-s.json" })
	fs.FalseNotFound(1)
	p := newProcessor(t, nlm.Config{Store: storage.New(fs), Clock: clk, Owner: "p1", Client: newPoster(nil)}, stagesFailingAt(""))
	runProcessor(t, p, 5*time.Second)
	done := func() bool { // read beside the faults
		b, _, err := w.Get(ctx, "nlm/jobs/job-s.json")
		var j lifecycle.NLMJob
		return err == nil && json.Unmarshal(b, &j) == nil && j.Status == lifecycle.NLMDone
	}
	select {
	case <-clk.WaitForTimers(1): // the first poll is over: the processor waits for the next
	case <-time.After(10 * time.Second):
		t.Fatal("the processor never waited for its next poll")
	}
	if fs.Faults().FalseNotFounds == 0 {
		t.Fatal("the first poll provoked no false not-found")
	}
	clk.Advance(time.Second)
	w.until(t, "job-s DONE", done)
}

// A second Accept of a processed job, whose create-only write the store
// took over the job, restarted it: its NLM query ran twice.
func TestSettleAcceptOfAProcessedJobDoesNotRestartIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fs := faultstore.New(memstore.New())
	fs.SetSettle(10*time.Second, nil)
	var queries atomic.Int64
	stages := stagesFailingAt("")
	query := stages.Query
	stages.Query = func(ctx context.Context, r lifecycle.NLMRequest, prompt string) (json.RawMessage, error) {
		queries.Add(1)
		return query(ctx, r, prompt)
	}
	p := newProcessor(t, nlm.Config{Store: storage.New(fs), Clock: clock.NewFake(t0), Owner: "p1", Client: newPoster(nil)}, stages)
	req := request("https://cb.example/r", "job-a")
	if _, err := p.Accept(ctx, req); err != nil {
		t.Fatal(err)
	}
	if j, err := p.Process(ctx, "job-a"); err != nil || j.Status != lifecycle.NLMDone {
		t.Fatalf("process: %+v, %v", j, err)
	}
	fs.Match(func(k string) bool { return k == "nlm/jobs/job-a.json" })
	fs.AcceptCreateOver(1)
	j, err := p.Accept(ctx, req)
	if err != nil || j.Status != lifecycle.NLMDone {
		t.Fatalf("second Accept: %+v, %v; want the job as it stands", j, err)
	}
	if _, err := p.Process(ctx, "job-a"); err == nil {
		t.Fatal("the processed job ran again")
	}
	if n := queries.Load(); n != 1 {
		t.Fatalf("Query ran %d times; want once", n)
	}
}
