package jobqueue_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// jobReads counts the reads of job records a store serves.
type jobReads struct {
	driver.Store
	n atomic.Int64
}

func (r *jobReads) Get(ctx context.Context, key string) ([]byte, storage.Version, error) {
	if strings.HasPrefix(key, "jobs/") {
		r.n.Add(1)
	}
	return r.Store.Get(ctx, key)
}

// TestCountsKnowQueuedJobsByTheirLanes: a count reads a QUEUED job once;
// the next counts know it by its lane entry and read only the jobs the
// locks name (one running), and still match the list after a claim, a
// cancel of a QUEUED job by another process and a new batch.
func TestCountsKnowQueuedJobsByTheirLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &jobReads{Store: memstore.New()}
	s := storage.New(r)
	clk := clock.NewFake(t0)
	types := func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}}
	}
	q := newQueue(t, s, clk, types)
	batch := func(from, n int) {
		t.Helper()
		jobs := make([]jobqueue.NewJob, n)
		for i := range jobs {
			jobs[i] = jobqueue.NewJob{JobID: fmt.Sprintf("e-%03d", from+i), JobType: emailType, AgentSlug: fmt.Sprintf("m-%d", i%7)}
		}
		if _, err := q.InsertMany(ctx, jobs); err != nil {
			t.Fatal(err)
		}
	}
	counted := func(after string, most int64) {
		t.Helper()
		r.n.Store(0)
		countsByCounts(t, q)
		if got := r.n.Load(); got > most {
			t.Fatalf("a count after %s read %d jobs; want at most %d", after, got, most)
		}
		sameCounts(t, q, after)
	}
	batch(0, 300)
	counted("300 inserts, the first count", 300)
	counted("nothing", 0)
	c := claim(t, q, "w")
	if c == nil {
		t.Fatal("nothing to claim")
	}
	counted("a claim", 1) // the job its lock names
	if _, err := c.Run(ctx, nil); err != nil {
		t.Fatal(err)
	}
	counted("the claim's end", 1)
	other := newQueue(t, s, clk, types)
	if _, err := other.Cancel(ctx, lifecycle.ActorAdmin, "e-299"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	counted("a cancel elsewhere", 1)
	// A cancel elsewhere whose entry's delete was lost: the job's rest
	// (its audit object) says the entry's count is old.
	var entry string
	for key, err := range s.List(ctx, "queue/lanes/") {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(key, "-e-298") {
			entry = key
		}
	}
	if entry == "" {
		t.Fatal("no lane entry of e-298")
	}
	if _, err := other.Cancel(ctx, lifecycle.ActorAdmin, "e-298"); err != nil {
		t.Fatal(err)
	}
	putRaw(t, s, entry, `{}`)
	counted("a cancel elsewhere, its entry left", 2)
	clk.Advance(2 * time.Minute) // past restSkew: read once more, then known at rest
	counted("two minutes on", 2)
	counted("nothing", 1)
	batch(300, 50)
	counted("50 more", 51)
}
