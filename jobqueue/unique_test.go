package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

const otherType lifecycle.JobType = "SEND_SMS"

// uniqueQueue is a Queue over s whose user types, SEND_EMAIL and
// SEND_SMS, complete at once.
func uniqueQueue(t *testing.T, s *storage.Store, clk clock.Clock) *jobqueue.Queue {
	t.Helper()
	return newQueue(t, s, clk, func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}, otherType: {Handler: jobqueue.HandlerFunc(sent)}}
	})
}

func uniqueJob(t lifecycle.JobType, payload string, u lifecycle.Unique) jobqueue.NewJob {
	return jobqueue.NewJob{JobType: t, Payload: json.RawMessage(payload), Unique: &u}
}

// countJobs counts the job records in s.
func countJobs(t *testing.T, s *storage.Store) int {
	t.Helper()
	return countKeys(t, s, "jobs/")
}

// TestUniqueJobExistsOnce: a unique job inserted twice in its period
// exists once, the second insert answering the first job as a duplicate;
// by arguments (as canonical JSON) or by key, per type, per period, and
// only while the job holding it is in one of the unique states.
func TestUniqueJobExistsOnce(t *testing.T) {
	byArgs := lifecycle.Unique{}
	byKey := lifecycle.Unique{Key: "account-42"}
	hourly := lifecycle.Unique{Key: "sync", Period: time.Hour}
	waiting := lifecycle.Unique{Key: "w", States: []lifecycle.JobState{lifecycle.JobQueued, lifecycle.JobRunning, lifecycle.JobRetryBackoff}}
	run := func(t *testing.T, q *jobqueue.Queue, _ *clock.Fake, _ string) {
		t.Helper()
		for c := claim(t, q, "w"); c != nil; c = claim(t, q, "w") {
			if _, err := c.Run(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name          string
		first, second jobqueue.NewJob
		between       func(t *testing.T, q *jobqueue.Queue, clk *clock.Fake, id string)
		wantDup       bool
	}{
		{"same args, other key order and spacing", uniqueJob(emailType, `{"to":"a","n":1}`, byArgs), uniqueJob(emailType, ` { "n" : 1, "to": "a" }`, byArgs), nil, true},
		{"other args", uniqueJob(emailType, `{"to":"a"}`, byArgs), uniqueJob(emailType, `{"to":"b"}`, byArgs), nil, false},
		{"a large number is not rounded", uniqueJob(emailType, `{"id":12345678901234567890}`, byArgs), uniqueJob(emailType, `{"id":12345678901234567891}`, byArgs), nil, false},
		{"same key, other args", uniqueJob(emailType, `{"to":"a"}`, byKey), uniqueJob(emailType, `{"to":"b"}`, byKey), nil, true},
		{"same key, other type", uniqueJob(emailType, `{}`, byKey), uniqueJob(otherType, `{}`, byKey), nil, false},
		{"within its period", uniqueJob(emailType, `{}`, hourly), uniqueJob(emailType, `{}`, hourly),
			func(_ *testing.T, _ *jobqueue.Queue, clk *clock.Fake, _ string) { clk.Advance(59 * time.Minute) }, true},
		{"the next period", uniqueJob(emailType, `{}`, hourly), uniqueJob(emailType, `{}`, hourly),
			func(_ *testing.T, _ *jobqueue.Queue, clk *clock.Fake, _ string) { clk.Advance(time.Hour) }, false},
		{"a delayed job's period is its run time's", uniqueJob(emailType, `{}`, hourly),
			func() jobqueue.NewJob { n := uniqueJob(emailType, `{}`, hourly); n.Delay = time.Hour; return n }(), nil, false},
		{"the holder completed: a default state", uniqueJob(emailType, `{}`, byKey), uniqueJob(emailType, `{}`, byKey), run, true},
		{"the holder completed, outside the states asked", uniqueJob(emailType, `{}`, waiting), uniqueJob(emailType, `{}`, waiting), run, false},
		{"the holder cancelled", uniqueJob(emailType, `{}`, byKey), uniqueJob(emailType, `{}`, byKey),
			func(t *testing.T, q *jobqueue.Queue, _ *clock.Fake, id string) {
				t.Helper()
				if _, err := q.Cancel(context.Background(), lifecycle.ActorAdmin, id); err != nil {
					t.Fatal(err)
				}
			}, false},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					s := sc.new(t)
					clk := clock.NewFake(t0)
					q := uniqueQueue(t, s, clk)
					a, err := q.InsertJob(ctx, tt.first)
					if err != nil || a.Duplicate || !strings.HasPrefix(a.JobID, "u-") {
						t.Fatalf("first insert: %s duplicate %v, %v; want a new job of a derived id", a.JobID, a.Duplicate, err)
					}
					if tt.between != nil {
						tt.between(t, q, clk, a.JobID)
					}
					before := countJobs(t, s)
					b, err := q.InsertJob(ctx, tt.second)
					if err != nil {
						t.Fatal(err)
					}
					if b.Duplicate != tt.wantDup || (b.JobID == a.JobID) != tt.wantDup {
						t.Fatalf("second insert: %s duplicate %v; first %s; want duplicate %v", b.JobID, b.Duplicate, a.JobID, tt.wantDup)
					}
					want := before + 1
					if tt.wantDup {
						want = before
					}
					if got := countJobs(t, s); got != want {
						t.Fatalf("%d jobs after the second insert, want %d", got, want)
					}
					if stored := get(t, q, b.JobID); stored.Duplicate {
						t.Fatal("a stored job reads as a duplicate")
					}
				})
			}
		})
	}
}

// TestUniqueRefused: a unique job with an id of its own, a state that is
// none, a period out of range is refused before any write.
func TestUniqueRefused(t *testing.T) {
	t.Parallel()
	q := uniqueQueue(t, memstore.New(), clock.NewFake(t0))
	for name, n := range map[string]jobqueue.NewJob{
		"own id":    {JobID: "mine", JobType: emailType, Unique: &lifecycle.Unique{}},
		"bad state": {JobType: emailType, Unique: &lifecycle.Unique{States: []lifecycle.JobState{"NAPPING"}}},
		"period":    {JobType: emailType, Unique: &lifecycle.Unique{Period: -time.Second}},
		"key":       {JobType: emailType, Unique: &lifecycle.Unique{Key: "a\nb"}},
	} {
		if _, err := q.InsertJob(context.Background(), n); !errors.Is(err, lifecycle.ErrInvalidJob) {
			t.Errorf("%s: %v, want ErrInvalidJob", name, err)
		}
	}
}

// TestUniqueConcurrentInserts: inserts of one uniqueness racing from
// several Queues over one store create one job, every insert answering it.
func TestUniqueConcurrentInserts(t *testing.T) {
	t.Parallel()
	for _, sc := range []storeCase{stores[0], {"filestore", fileStore}, {"sqlite", teststores.SQLite}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			s := sc.new(t)
			clk := clock.NewFake(t0)
			var wg sync.WaitGroup
			ids := make([]string, 8)
			errs := make([]error, 8)
			for i := range ids {
				q := uniqueQueue(t, s, clk)
				wg.Go(func() {
					j, err := q.InsertJob(context.Background(), uniqueJob(emailType, `{"to":"a"}`, lifecycle.Unique{}))
					ids[i], errs[i] = j.JobID, err
				})
			}
			wg.Wait()
			for i := range ids {
				if errs[i] != nil || ids[i] != ids[0] {
					t.Fatalf("insert %d: %s, %v; insert 0: %s", i, ids[i], errs[i], ids[0])
				}
			}
			if n := countJobs(t, s); n != 1 {
				t.Fatalf("%d jobs, want 1", n)
			}
		})
	}
}

// TestUniqueBatch: InsertMany honours uniqueness against the store and
// within the batch, writing the rest together.
func TestUniqueBatch(t *testing.T) {
	t.Parallel()
	for _, sc := range []storeCase{stores[0], {"filestore", fileStore}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := sc.new(t)
			q := uniqueQueue(t, s, clock.NewFake(t0))
			held, err := q.InsertJob(ctx, uniqueJob(emailType, `{"to":"held"}`, lifecycle.Unique{}))
			if err != nil {
				t.Fatal(err)
			}
			batch := []jobqueue.NewJob{
				uniqueJob(emailType, `{"to":"a"}`, lifecycle.Unique{}),
				{JobType: emailType},
				uniqueJob(emailType, `{"to":"held"}`, lifecycle.Unique{}),
				uniqueJob(emailType, `{ "to" : "a" }`, lifecycle.Unique{}),
			}
			got, err := q.InsertMany(ctx, batch)
			if err != nil || len(got) != len(batch) {
				t.Fatalf("InsertMany: %d jobs, %v", len(got), err)
			}
			if got[0].Duplicate || got[1].Duplicate || !got[2].Duplicate || got[2].JobID != held.JobID || !got[3].Duplicate || got[3].JobID != got[0].JobID {
				t.Fatalf("answers %+v", got)
			}
			if n := countJobs(t, s); n != 3 {
				t.Fatalf("%d jobs, want 3 (the held one, a new unique one, a plain one)", n)
			}
			again, err := q.InsertMany(ctx, batch[:1])
			if err != nil || !again[0].Duplicate || again[0].JobID != got[0].JobID {
				t.Fatalf("again: %+v, %v", again, err)
			}
		})
	}
}

// TestUniqueSettle: on a store that settles, an insert that reads the job
// holding its uniqueness missing twice (and whose create the store would
// accept over it) does not create it again: it waits for a second read the
// settle time later, which finds the job, and answers it as a duplicate;
// the job, running meanwhile, is not replaced. A new uniqueness is
// created once its absence is settled.
func TestUniqueSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fs, clk := settlingUniqueQueue(t)
	n := uniqueJob(emailType, `{"to":"a"}`, lifecycle.Unique{})
	first := insertSettled(t, clk, settle, func() (lifecycle.Job, error) { return q.InsertJob(ctx, n) })
	if first.Duplicate {
		t.Fatal("first insert answered a duplicate")
	}
	c := claim(t, q, "w")
	if c == nil {
		t.Fatal("no claim")
	}
	fs.FalseNotFound(2) // the insert's read and the create's own read before it
	fs.AcceptCreateOver(1)
	second := insertSettled(t, clk, 0, func() (lifecycle.Job, error) { return q.InsertJob(ctx, n) })
	if !second.Duplicate || second.JobID != first.JobID || second.Status != lifecycle.JobRunning {
		t.Fatalf("second insert: %s %s duplicate %v; want the running %s", second.JobID, second.Status, second.Duplicate, first.JobID)
	}
	if f := fs.Faults(); f.FalseNotFounds != 2 || f.DoubleCreates != 0 {
		t.Fatalf("faults %+v: want the two false not-founds met and no create over the job", f)
	}
	if j := get(t, q, first.JobID); j.Status != lifecycle.JobRunning {
		t.Fatalf("the running job was replaced: %s", j.Status)
	}
	if _, err := c.Run(ctx, nil); err != nil {
		t.Fatalf("the running job's claim: %v", err)
	}
}

// settlingUniqueQueue is uniqueQueue over a fault store that settles in
// settle, its faults limited to the job records.
func settlingUniqueQueue(t *testing.T) (*jobqueue.Queue, *faultstore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	fs := faultstore.New(memstore.New())
	fs.SetSettle(settle, clk.Now)
	fs.Match(func(k string) bool { return strings.HasPrefix(k, "jobs/") })
	return uniqueQueue(t, storage.New(fs), clk), fs, clk
}

// insertSettled runs insert, which waits on the fake clock for the store to
// settle, moving the clock on until it returns; it fails the test unless
// the insert waited at least minWait.
func insertSettled(t *testing.T, clk *clock.Fake, minWait time.Duration, insert func() (lifecycle.Job, error)) lifecycle.Job {
	t.Helper()
	start := clk.Now()
	done := make(chan struct{})
	var (
		j   lifecycle.Job
		err error
	)
	go func() { defer close(done); j, err = insert() }()
	for {
		select {
		case <-done:
			if err != nil {
				t.Fatal(err)
			}
			if waited := clk.Now().Sub(start); waited < minWait {
				t.Fatalf("the insert returned after %s, before %s", waited, minWait)
			}
			return j
		case <-time.After(time.Millisecond):
			clk.Advance(settle / 8)
		}
	}
}

// TestUniqueAndSnoozeWrites: a unique job costs the writes of any job end
// to end (its uniqueness is its record's create-only write), a duplicate
// insert none; a snooze's cost is logged (docs/performance.md).
func TestUniqueAndSnoozeWrites(t *testing.T) {
	t.Parallel()
	for _, sc := range []storeCase{stores[0], {"filestore", fileStore}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cs := &classStore{Store: sc.new(t)}
			clk := clock.NewFake(t0)
			snoozed := map[string]bool{}
			q := newQueue(t, storage.New(cs), clk, func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
					if string(j.Payload) == `{"snooze":true}` && !snoozed[j.JobID] {
						snoozed[j.JobID] = true
						return lifecycle.JobOutput{}, jobqueue.Snooze(time.Minute)
					}
					return sent(ctx, j)
				})}}
			})
			count := func(insert func() lifecycle.Job) (int, lifecycle.Job) {
				t.Helper()
				cs.mu.Lock()
				cs.writes = nil
				cs.mu.Unlock()
				j := insert()
				for range 3 {
					for c := claim(t, q, "w"); c != nil; c = claim(t, q, "w") {
						if _, err := c.Run(ctx, nil); err != nil {
							t.Fatal(err)
						}
					}
					clk.Advance(time.Minute)
				}
				return cs.durable(), j
			}
			insert := func(n jobqueue.NewJob) func() lifecycle.Job {
				return func() lifecycle.Job {
					j, err := q.InsertJob(ctx, n)
					if err != nil {
						t.Fatal(err)
					}
					return j
				}
			}
			count(insert(jobqueue.NewJob{JobType: emailType})) // warm: the lane's lock is made once, ever
			plain, _ := count(insert(jobqueue.NewJob{JobType: emailType}))
			u := uniqueJob(emailType, `{"to":"a"}`, lifecycle.Unique{})
			unique, first := count(insert(u))
			dup, again := count(insert(u))
			snooze, _ := count(insert(jobqueue.NewJob{JobType: emailType, Payload: json.RawMessage(`{"snooze":true}`)}))
			t.Logf("writes: a job %d, a unique job %d, a duplicate insert %d, a job snoozed once %d", plain, unique, dup, snooze)
			if unique != plain || dup != 0 || !again.Duplicate || again.JobID != first.JobID {
				t.Fatalf("a unique job %d writes (a job %d), a duplicate insert %d (want none), answered %s duplicate %v", unique, plain, dup, again.JobID, again.Duplicate)
			}
			if get(t, q, first.JobID).Status != lifecycle.JobComplete {
				t.Fatal("the unique job did not complete")
			}
		})
	}
}

// TestUniqueSettleDisturbed: an insert made while the store is disturbed
// (every read of the job missing, every create over it accepted, for the
// settle time) of a uniqueness a completed job holds creates nothing: its
// reads go on until one, the settle time after the first, finds the job.
func TestUniqueSettleDisturbed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, fs, clk := settlingUniqueQueue(t)
	n := uniqueJob(emailType, `{"to":"a"}`, lifecycle.Unique{})
	first := insertSettled(t, clk, settle, func() (lifecycle.Job, error) { return q.InsertJob(ctx, n) })
	runAll(t, q, jobqueue.Handlers{})
	if j := get(t, q, first.JobID); j.Status != lifecycle.JobComplete {
		t.Fatalf("first job %s", j.Status)
	}
	fs.Disturb()
	again := insertSettled(t, clk, settle, func() (lifecycle.Job, error) { return q.InsertJob(ctx, n) })
	fs.Calm()
	if !again.Duplicate || again.JobID != first.JobID || again.Status != lifecycle.JobComplete {
		t.Fatalf("insert during the disturbance: %s %s duplicate %v; want the completed %s", again.JobID, again.Status, again.Duplicate, first.JobID)
	}
	if f := fs.Faults(); f.FalseNotFounds == 0 || f.DoubleCreates != 0 {
		t.Fatalf("faults %+v: want false not-founds met and no create over the job", f)
	}
	if j := get(t, q, first.JobID); j.Status != lifecycle.JobComplete {
		t.Fatalf("the completed job was replaced: %s", j.Status)
	}
}

// BenchmarkUniqueInsert: an insert of a job, of a unique job (new each
// time: one read more) and of a duplicate (one read, no write), on
// memstore.
func BenchmarkUniqueInsert(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		job  func(i int) jobqueue.NewJob
	}{
		{"plain", func(int) jobqueue.NewJob {
			return jobqueue.NewJob{JobType: emailType, Payload: json.RawMessage(`{"to":"a"}`)}
		}},
		{"unique", func(i int) jobqueue.NewJob {
			return uniqueJob(emailType, `{"to":"a","n":`+strconv.Itoa(i)+`}`, lifecycle.Unique{})
		}},
		{"duplicate", func(int) jobqueue.NewJob { return uniqueJob(emailType, `{"to":"a"}`, lifecycle.Unique{}) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			q := newQueue(b, memstore.New(), clock.Real(), func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}}
			})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := q.InsertJob(ctx, bc.job(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUniquePrefixIsReserved: a plain job may not take a unique job's id
// form, or it would stand in for a uniqueness it does not hold.
func TestUniquePrefixIsReserved(t *testing.T) {
	t.Parallel()
	q := newQueue(t, storage.New(memstore.New()), clock.NewFake(t0))
	_, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, jobqueue.NewJob{JobID: "u-0123456789abcdef0123456789abcdef", RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "a"})
	if !errors.Is(err, lifecycle.ErrInvalidJob) {
		t.Fatalf("Enqueue of a plain job at a unique id = %v, want ErrInvalidJob", err)
	}
}
