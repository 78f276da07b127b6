package jobqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// heldKey holds every write (a Put, or a Commit with a write) of one key,
// once armed, until opened.
type heldKey struct {
	driver.Store
	mu   sync.Mutex
	key  string
	open chan struct{}
}

func (h *heldKey) arm(key string) {
	h.mu.Lock()
	h.key = key
	h.mu.Unlock()
}

func (h *heldKey) hold(key string) {
	h.mu.Lock()
	held := h.key != "" && key == h.key
	h.mu.Unlock()
	if held {
		<-h.open
	}
}

func (h *heldKey) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	h.hold(key)
	return h.Store.Put(ctx, key, value, cond)
}

func (h *heldKey) Commit(ctx context.Context, writes []driver.Write) ([]storage.Version, error) {
	for _, w := range writes {
		h.hold(w.Key)
	}
	return h.Store.(driver.Committer).Commit(ctx, writes)
}

// TestSlotClaimsWhileTheEndIsWritten: a Worker of one slot whose first
// job's end cannot be written yet (its record's write held) runs its next
// job's handler meanwhile, but not a third (one end in flight a slot);
// once the write goes through, every job completes.
func TestSlotClaimsWhileTheEndIsWritten(t *testing.T) {
	t.Parallel()
	for _, commits := range []bool{true, false} {
		name := map[bool]string{true: "one commit", false: "writes one by one"}[commits]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			held := &heldKey{Store: memstore.NewDriver(), open: make(chan struct{})}
			var d driver.Store = held
			if !commits {
				d = struct{ driver.Store }{held} // no Commit: the queue writes key by key
			}
			started := make(chan string, 3)
			var first sync.Once
			q := emailQueue(t, clock.NewFake(t0), jobqueue.HandlerFunc(func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
				first.Do(func() {
					key, _ := layout.JobKey(job.JobID)
					held.arm(key) // this job's end will wait
				})
				started <- job.JobID
				return sent(ctx, job)
			}), func(c *jobqueue.Config) { c.Store = storage.New(d) })
			for _, id := range []string{"job-a", "job-b", "job-c"} {
				if _, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{JobID: id, JobType: emailType, AgentSlug: "agent-" + id}); err != nil {
					t.Fatal(err)
				}
			}
			startWorker(t, &jobqueue.Worker{Queue: q, ID: "w", Slots: 1, PollInterval: time.Hour, SweepInterval: -1})
			one := within(t, "the first job's handler", started)
			two := within(t, "the second job's handler, the first job's end held", started)
			select {
			case three := <-started:
				t.Fatalf("a third job (%s) started with %s's end still held: more than one end in flight a slot", three, one)
			case <-time.After(200 * time.Millisecond):
			}
			close(held.open)
			three := within(t, "the third job's handler, the end let through", started)
			for _, id := range []string{one, two, three} {
				waitFor(t, func() bool { return get(t, q, id).Status == lifecycle.JobComplete })
			}
		})
	}
}
