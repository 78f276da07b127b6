package jobqueue_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// commitLog wraps a committing driver and records the size of each Commit
// (and the single writes); failAt, when set, fails that Commit (from 1)
// before it reaches the store, with err.
type commitLog struct {
	driver.Store
	mu      sync.Mutex
	sizes   []int
	singles int
	failAt  int
	err     error
}

func (c *commitLog) Unwrap() driver.Store { return c.Store }

func (c *commitLog) Commit(ctx context.Context, ws []storage.Write) ([]storage.Version, error) {
	c.mu.Lock()
	c.sizes = append(c.sizes, len(ws))
	fail := len(c.sizes) == c.failAt
	c.mu.Unlock()
	if fail {
		return nil, c.err
	}
	return c.Store.(driver.Committer).Commit(ctx, ws)
}

func (c *commitLog) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	c.mu.Lock()
	c.singles++
	c.mu.Unlock()
	return c.Store.Put(ctx, key, value, cond)
}

func (c *commitLog) Delete(ctx context.Context, key string, cond storage.Condition) error {
	c.mu.Lock()
	c.singles++
	c.mu.Unlock()
	return c.Store.Delete(ctx, key, cond)
}

// committingStores are the stores that commit several writes at once.
var committingStores = []struct {
	name string
	new  func(testing.TB) driver.Store
}{
	{"memstore", func(testing.TB) driver.Store { return memstore.New() }},
	{"sqlitestore", func(tb testing.TB) driver.Store {
		d, err := sqlitestore.NewDriver(context.Background(), sqlitestore.Config{Path: filepath.Join(tb.TempDir(), "store.db")})
		if err != nil {
			tb.Fatal(err)
		}
		if c, ok := d.(interface{ Close() error }); ok {
			tb.Cleanup(func() { _ = c.Close() })
		}
		return d
	}},
}

// TestInsertManyThousand: 1,000 jobs in one call land in commits of at
// most 500 jobs, each commit's writes shared (the agent's new lock in a
// commit of its own, then 1,000 writes and 1,000 writes, nothing else),
// in the batch's order, with a unique job's duplicate in the second
// commit answered by its holder from the first, and a per-type attempts
// setting recorded on every job.
func TestInsertManyThousand(t *testing.T) {
	t.Parallel()
	for _, sc := range committingStores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			log := &commitLog{Store: sc.new(t)}
			s := storage.New(log)
			q := newQueue(t, s, clock.NewFake(t0), func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent), MaxAttempts: 7}}
			})
			jobs := make([]jobqueue.NewJob, 1000)
			for i := range jobs {
				jobs[i] = jobqueue.NewJob{JobID: fmt.Sprintf("job-%04d", i), JobType: emailType, AgentSlug: "a"}
			}
			jobs[10] = uniqueJob(emailType, `{}`, lifecycle.Unique{Key: "once"})
			jobs[10].AgentSlug = "a"
			jobs[600] = jobs[10]
			got, err := q.InsertMany(ctx, jobs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1000 || got[999].JobID != "job-0999" || got[999].MaxAttempts != 7 {
				t.Fatalf("answer: %d jobs, last %+v", len(got), got[len(got)-1])
			}
			if got[10].Duplicate || !got[600].Duplicate || got[600].JobID != got[10].JobID {
				t.Fatalf("unique jobs: 10 = %s dup %v, 600 = %s dup %v; want 600 answered by 10", got[10].JobID, got[10].Duplicate, got[600].JobID, got[600].Duplicate)
			}
			if want := []int{1, 1000, 998}; fmt.Sprint(log.sizes) != fmt.Sprint(want) || log.singles != 0 {
				t.Fatalf("commits of %v writes and %d single writes; want %v and none", log.sizes, log.singles, want)
			}
			lane := laneIDs(t, s, "a")
			if len(lane) != 999 || lane[0] != "job-0000" || lane[500] != "job-0500" || lane[600] != "job-0601" || lane[998] != "job-0999" {
				t.Fatalf("lane a holds %d jobs (%v ... ); want 999 in the batch's order", len(lane), lane[:3])
			}
		})
	}
}

// TestInsertManyPartial: a failure in a batch's second commit leaves its
// first commit's jobs landed, returned and named by the error's Landed,
// and none of the rest written; a job at fault is named by its index.
func TestInsertManyPartial(t *testing.T) {
	t.Parallel()
	broken := errors.New("disk on fire")
	tests := []struct {
		name   string
		failAt int    // the commit that fails (0: none)
		exists string // a job id the store holds already
		index  int
		want   error
	}{
		{"the store fails the second commit", 3, "", 500, broken},
		{"a job of the second commit exists", 0, "job-0700", 700, lifecycle.ErrJobExists},
	}
	for _, sc := range committingStores {
		for _, tt := range tests {
			t.Run(sc.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				log := &commitLog{Store: sc.new(t), err: broken}
				s := storage.New(log)
				q := newQueue(t, s, clock.NewFake(t0))
				if tt.exists != "" {
					enqueue(t, q, tt.exists, "b")
				}
				log.failAt = tt.failAt
				jobs := make([]jobqueue.NewJob, 1000)
				for i := range jobs {
					jobs[i] = spec(fmt.Sprintf("job-%04d", i), "a")
				}
				got, err := q.InsertMany(ctx, jobs)
				be, ok := errors.AsType[*lifecycle.BatchError](err)
				if !ok || be.Landed != 500 || be.Index != tt.index || !errors.Is(err, tt.want) {
					t.Fatalf("InsertMany = %v; want a *BatchError at job %d, 500 landed, matching %v", err, tt.index, tt.want)
				}
				if len(got) != 500 || got[499].JobID != "job-0499" {
					t.Fatalf("returned %d jobs; want the first 500", len(got))
				}
				for i, id := range []string{"job-0000", "job-0499"} {
					if _, err := q.Job(ctx, id); err != nil {
						t.Fatalf("landed job %d (%s): %v", i, id, err)
					}
				}
				if n := countJobs(t, s); n != 500+len(tt.exists[:min(len(tt.exists), 1)]) {
					t.Fatalf("%d job records; want the 500 landed (and the one that existed)", n)
				}
				if lane := laneIDs(t, s, "a"); len(lane) != 500 || lane[499] != "job-0499" {
					t.Fatalf("lane a holds %d entries; want the 500 landed", len(lane))
				}
			})
		}
	}
}

// BenchmarkInsertManyThousand: 1,000 jobs of one agent on sqlitestore,
// in one InsertMany call and one Enqueue at a time, with the commits and
// writes each costs (reported per 1,000 jobs).
func BenchmarkInsertManyThousand(b *testing.B) {
	for _, mode := range []string{"InsertMany", "Enqueue"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			log := &commitLog{Store: committingStores[1].new(b)}
			q := newQueue(b, storage.New(log), clock.Real())
			n := 0
			for b.Loop() {
				jobs := make([]jobqueue.NewJob, 1000)
				for i := range jobs {
					jobs[i] = spec(fmt.Sprintf("job-%07d", n), "a")
					n++
				}
				if mode == "InsertMany" {
					if _, err := q.InsertMany(ctx, jobs); err != nil {
						b.Fatal(err)
					}
					continue
				}
				for _, j := range jobs {
					if _, err := q.InsertJob(ctx, j); err != nil {
						b.Fatal(err)
					}
				}
			}
			writes := 0
			for _, w := range log.sizes {
				writes += w
			}
			b.ReportMetric(float64(len(log.sizes))/float64(b.N), "commits/op")
			b.ReportMetric(float64(writes+log.singles)/float64(b.N), "writes/op")
		})
	}
}
