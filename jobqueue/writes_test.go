package jobqueue_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// classStore counts the writes (Puts and Deletes) a store serves by the
// class of their key: job record, lane entry, agent lock, artifact, audit
// event and the rest.
type classStore struct {
	storage.Store
	mu     sync.Mutex
	writes map[string]int
}

func keyClass(key string) string {
	switch {
	case strings.HasPrefix(key, storage.JobsPrefix):
		return "job record"
	case strings.HasPrefix(key, storage.LanesPrefix):
		return "lane entry"
	case strings.HasPrefix(key, storage.AgentLocksPrefix):
		return "agent lock"
	case strings.HasPrefix(key, "projects/"):
		return "artifact"
	case strings.HasPrefix(key, "audit/"):
		return "audit event"
	}
	return "other " + key
}

func (c *classStore) count(op, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes == nil {
		c.writes = map[string]int{}
	}
	c.writes[keyClass(key)+" "+op]++
}

func (c *classStore) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	c.count("put", key)
	return c.Store.Put(ctx, key, value, cond)
}

func (c *classStore) Delete(ctx context.Context, key string, cond storage.Condition) error {
	c.count("delete", key)
	return c.Store.Delete(ctx, key, cond)
}

func (c *classStore) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.writes {
		n += v
	}
	return n
}

func (c *classStore) table(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ks []string
	for k := range c.writes {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, "%-24s %.2f\n", k, float64(c.writes[k])/float64(n))
	}
	return b.String()
}

// finishCounter is a Metrics that closes done once n jobs finished.
type finishCounter struct {
	n, seen int
	mu      sync.Mutex
	done    chan struct{}
}

func (f *finishCounter) JobTransition(jobqueue.JobType, jobqueue.JobState, jobqueue.JobState, time.Duration) {
}
func (f *finishCounter) AttemptFailed(jobqueue.JobType, jobqueue.JobState, string) {}
func (f *finishCounter) JobFinished(_ jobqueue.JobType, _ jobqueue.JobState, _ time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen++; f.seen == f.n {
		close(f.done)
	}
}

// runWorker enqueues n jobs over agents agents and runs them with one
// Worker of slots slots and handlers h, the way a service does, until all
// n finished; it returns the time from the first enqueue to the last end.
func runWorker(tb testing.TB, s storage.Store, n, agents, slots int, h jobqueue.Handlers) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &finishCounter{n: n, done: make(chan struct{})}
	q := newQueue(tb, s, clock.Real(), func(c *jobqueue.Config) { c.Metrics = fc })
	start := time.Now()
	var enq sync.WaitGroup
	per := (n + slots - 1) / slots
	for w := range slots {
		enq.Go(func() {
			for i := w * per; i < min(n, (w+1)*per); i++ {
				j := spec("job-"+strconv.Itoa(i), "agent-"+strconv.Itoa(i%agents))
				if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, j); err != nil {
					tb.Error(err)
					return
				}
			}
		})
	}
	enq.Wait()
	w := &jobqueue.Worker{Queue: q, ID: "w", Handlers: h, Slots: slots, PollInterval: 10 * time.Millisecond, SweepInterval: -1}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	select {
	case <-fc.done:
	case <-time.After(time.Minute):
		tb.Errorf("%d of %d jobs finished after a minute", fc.seen, n)
	}
	el := time.Since(start)
	cancel()
	if err := <-stopped; err != nil {
		tb.Error(err)
	}
	return el
}

// TestWritesPerJobTable logs the writes of one job's life by key class:
// the table of docs/performance.md, "Writes per job (issue 12)".
func TestWritesPerJobTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    jobqueue.Handlers
	}{{"no-op handlers", noopHandlers}, {"with AssembleContext", okHandlers()}} {
		t.Run(tc.name, func(t *testing.T) {
			cs := &classStore{Store: stores[0].new(t)}
			const n = 200
			runWorker(t, cs, n, 50, 4, tc.h)
			t.Logf("writes per job over %d jobs:\n%s total %.2f/job", n, cs.table(n), float64(cs.total())/n)
		})
	}
}
