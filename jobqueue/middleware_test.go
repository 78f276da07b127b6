package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// calls records what the middleware and the handler did, in order.
type calls struct {
	mu  sync.Mutex
	log []string
}

func (tr *calls) add(s string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.log = append(tr.log, s)
}

func (tr *calls) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.log, " ")
}

// insertMW logs name around next and tags each job's payload with it.
func insertMW(tr *calls, name string) func(jobqueue.InsertFunc) jobqueue.InsertFunc {
	return func(next jobqueue.InsertFunc) jobqueue.InsertFunc {
		return func(ctx context.Context, jobs []jobqueue.NewJob) ([]lifecycle.Job, error) {
			tr.add(name + ">")
			for i := range jobs {
				jobs[i].Payload = json.RawMessage(fmt.Sprintf(`{"by":%q}`, name))
			}
			out, err := next(ctx, jobs)
			tr.add(fmt.Sprintf("<%s(%d)", name, len(out)))
			return out, err
		}
	}
}

// workMW logs name around next.
func workMW(tr *calls, name string) func(jobqueue.Handler) jobqueue.Handler {
	return func(next jobqueue.Handler) jobqueue.Handler {
		return jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
			tr.add(name + ">")
			out, err := next.Work(ctx, j)
			tr.add("<" + name)
			return out, err
		})
	}
}

// TestInsertMiddlewareOrder: every insert, single or batch, Go call or
// the system's, goes through the middleware, first in the list
// outermost; what the innermost changes is what is written, and the
// caller's jobs are left as they were.
func TestInsertMiddlewareOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	email := jobqueue.NewJob{JobType: emailType}
	tests := []struct {
		name   string
		insert func(q *jobqueue.Queue) ([]lifecycle.Job, error)
		n      int
	}{
		{"Enqueue", func(q *jobqueue.Queue) ([]lifecycle.Job, error) {
			j, err := q.Enqueue(ctx, lifecycle.ActorGateway, email)
			return []lifecycle.Job{j}, err
		}, 1},
		{"Insert", func(q *jobqueue.Queue) ([]lifecycle.Job, error) {
			j, err := q.Insert(ctx, emailType, nil)
			return []lifecycle.Job{j}, err
		}, 1},
		{"InsertJob", func(q *jobqueue.Queue) ([]lifecycle.Job, error) {
			j, err := q.InsertJob(ctx, email)
			return []lifecycle.Job{j}, err
		}, 1},
		{"EnqueueMany", func(q *jobqueue.Queue) ([]lifecycle.Job, error) {
			return q.EnqueueMany(ctx, lifecycle.ActorGateway, []jobqueue.NewJob{email, email, email})
		}, 3},
		{"InsertMany", func(q *jobqueue.Queue) ([]lifecycle.Job, error) {
			return q.InsertMany(ctx, []jobqueue.NewJob{email, email})
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &calls{}
			q := emailQueue(t, clock.NewFake(t0), jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
				c.InsertMiddleware = []func(jobqueue.InsertFunc) jobqueue.InsertFunc{insertMW(tr, "a"), insertMW(tr, "b")}
			})
			jobs, err := tt.insert(q)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("a> b> <b(%d) <a(%d)", tt.n, tt.n)
			if got := tr.String(); got != want || len(jobs) != tt.n {
				t.Fatalf("ran %q and returned %d jobs, want %q and %d", got, len(jobs), want, tt.n)
			}
			for _, j := range jobs {
				if got := get(t, q, j.JobID); string(got.Payload) != `{"by":"b"}` {
					t.Errorf("job %s written with payload %s, want the innermost's", j.JobID, got.Payload)
				}
			}
		})
	}
	t.Run("the caller's jobs are not changed", func(t *testing.T) {
		t.Parallel()
		q := emailQueue(t, clock.NewFake(t0), jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
			c.InsertMiddleware = []func(jobqueue.InsertFunc) jobqueue.InsertFunc{insertMW(&calls{}, "a")}
		})
		mine := []jobqueue.NewJob{{JobType: emailType}}
		if _, err := q.InsertMany(ctx, mine); err != nil {
			t.Fatal(err)
		}
		if mine[0].Payload != nil {
			t.Fatalf("the caller's job now has payload %s", mine[0].Payload)
		}
	})
}

// TestInsertMiddlewareRefuses: a middleware that refuses, panics or
// returns nothing writes nothing, and its error's code is the code
// table's; an actor the matrix refuses never reaches the middleware.
func TestInsertMiddlewareRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refuse := func(err error) func(jobqueue.InsertFunc) jobqueue.InsertFunc {
		return func(jobqueue.InsertFunc) jobqueue.InsertFunc {
			return func(context.Context, []jobqueue.NewJob) ([]lifecycle.Job, error) { return nil, err }
		}
	}
	panics := func(jobqueue.InsertFunc) jobqueue.InsertFunc {
		return func(context.Context, []jobqueue.NewJob) ([]lifecycle.Job, error) { panic("tenant lookup failed") }
	}
	tests := []struct {
		name     string
		mw       func(jobqueue.InsertFunc) jobqueue.InsertFunc
		actor    lifecycle.Actor
		code     string
		contains string
	}{
		{"refused as bad input", refuse(fmt.Errorf("%w: no tenant", lifecycle.ErrInvalidInput)), lifecycle.ActorGateway, codes.InvalidInput, "no tenant"},
		{"refused as forbidden", refuse(&lifecycle.ForbiddenActorError{Machine: "job", Actor: lifecycle.ActorGateway}), lifecycle.ActorGateway, codes.Forbidden, "may not"},
		{"refused otherwise", refuse(errors.New("quota lookup down")), lifecycle.ActorGateway, codes.InternalError, "quota lookup down"},
		{"panics", panics, lifecycle.ActorGateway, codes.InternalError, "insert middleware panicked: tenant lookup failed"},
		{"returns no job", refuse(nil), lifecycle.ActorGateway, codes.InternalError, "returned no job"},
		{"a refused actor", panics, lifecycle.ActorFrontend, codes.Forbidden, "frontend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := emailQueue(t, clock.NewFake(t0), jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
				c.InsertMiddleware = []func(jobqueue.InsertFunc) jobqueue.InsertFunc{tt.mw}
			})
			_, err := q.Enqueue(ctx, tt.actor, jobqueue.NewJob{JobID: "job-1", JobType: emailType})
			if err == nil || lifecycle.ErrorCode(err) != tt.code || !strings.Contains(err.Error(), tt.contains) {
				t.Fatalf("Enqueue: %v (code %s), want code %s and %q", err, lifecycle.ErrorCode(err), tt.code, tt.contains)
			}
			if _, err := q.Job(ctx, "job-1"); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("the refused job was written: %v", err)
			}
			if tt.name == "returns no job" {
				return // a batch may come back empty
			}
			if _, err := q.EnqueueMany(ctx, tt.actor, []jobqueue.NewJob{{JobType: emailType}}); lifecycle.ErrorCode(err) != tt.code {
				t.Fatalf("EnqueueMany: %v, want code %s", err, tt.code)
			}
			if d, err := q.Depths(ctx); err != nil || len(d) != 0 {
				t.Fatalf("lanes after refusals: %v %v", d, err)
			}
		})
	}
}

// TestInsertMiddlewareIgnoresCtx: a middleware that goes on after its
// context ended cannot make the queue write past it: the queue's own
// write honours the context it is given.
func TestInsertMiddlewareIgnoresCtx(t *testing.T) {
	t.Parallel()
	ignores := func(next jobqueue.InsertFunc) jobqueue.InsertFunc {
		return func(ctx context.Context, jobs []jobqueue.NewJob) ([]lifecycle.Job, error) {
			return next(ctx, jobs) // no check of ctx
		}
	}
	q := emailQueue(t, clock.NewFake(t0), jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
		c.InsertMiddleware = []func(jobqueue.InsertFunc) jobqueue.InsertFunc{ignores}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.InsertJob(ctx, jobqueue.NewJob{JobID: "job-1", JobType: emailType}); !errors.Is(err, context.Canceled) {
		t.Fatalf("insert under an ended context: %v, want context.Canceled", err)
	}
	if _, err := q.Job(context.Background(), "job-1"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("written under an ended context: %v", err)
	}
}

// TestWorkMiddleware: the middleware wraps every handler call of a user
// type, first outermost, inside the call's timeout and panic handling; a
// refusal or a panic is the attempt's failure; the NLM pipeline's steps
// are not wrapped.
func TestWorkMiddleware(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refuse := func(err error) func(jobqueue.Handler) jobqueue.Handler {
		return func(jobqueue.Handler) jobqueue.Handler {
			return jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
				return lifecycle.JobOutput{}, err
			})
		}
	}
	tests := []struct {
		name     string
		mw       func(tr *calls) []func(jobqueue.Handler) jobqueue.Handler
		want     lifecycle.JobState
		code     string
		ran      string
		contains string
	}{
		{"nested in order", func(tr *calls) []func(jobqueue.Handler) jobqueue.Handler {
			return []func(jobqueue.Handler) jobqueue.Handler{workMW(tr, "a"), workMW(tr, "b")}
		}, lifecycle.JobComplete, "", "a> b> handler <b <a", ""},
		{"refuses, to be retried", func(tr *calls) []func(jobqueue.Handler) jobqueue.Handler {
			return []func(jobqueue.Handler) jobqueue.Handler{workMW(tr, "a"), refuse(errors.New("rate limited"))}
		}, lifecycle.JobRetryBackoff, codes.JobHandlerError, "a> <a", "rate limited"},
		{"refuses for good", func(tr *calls) []func(jobqueue.Handler) jobqueue.Handler {
			return []func(jobqueue.Handler) jobqueue.Handler{refuse(jobqueue.Permanent(errors.New("tenant gone")))}
		}, lifecycle.JobDead, codes.JobPermanent, "", "tenant gone"},
		{"panics", func(tr *calls) []func(jobqueue.Handler) jobqueue.Handler {
			return []func(jobqueue.Handler) jobqueue.Handler{func(jobqueue.Handler) jobqueue.Handler {
				return jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) { panic("nil map") })
			}}
		}, lifecycle.JobRetryBackoff, codes.JobHandlerError, "", "panicked: nil map"},
		{"returns no Handler", func(tr *calls) []func(jobqueue.Handler) jobqueue.Handler {
			return []func(jobqueue.Handler) jobqueue.Handler{func(jobqueue.Handler) jobqueue.Handler { return nil }}
		}, lifecycle.JobRetryBackoff, codes.JobHandlerError, "", "WorkMiddleware[0] returned no Handler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := &calls{}
			h := jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
				tr.add("handler")
				return sent(ctx, j)
			})
			q := emailQueue(t, clock.NewFake(t0), h, func(c *jobqueue.Config) { c.WorkMiddleware = tt.mw(tr) })
			enqueueEmail(t, q, "job-1", 3)
			j, err := claim(t, q, "w1").Run(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			msg := ""
			if j.Error != nil {
				msg = *j.Error
			}
			if j.Status != tt.want || j.ErrorCode != tt.code || tr.String() != tt.ran || !strings.Contains(msg, tt.contains) {
				t.Fatalf("%s %q %q, ran %q; want %s %q %q, ran %q", j.Status, j.ErrorCode, msg, tr, tt.want, tt.code, tt.contains, tt.ran)
			}
		})
	}
	t.Run("the NLM pipeline is not wrapped", func(t *testing.T) {
		t.Parallel()
		tr := &calls{}
		q := emailQueue(t, clock.NewFake(t0), jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
			c.WorkMiddleware = []func(jobqueue.Handler) jobqueue.Handler{workMW(tr, "a")}
		})
		enqueue(t, q, "job-b", "agent-b")
		if j, err := claim(t, q, "w1").Run(ctx, okHandlers()); err != nil || j.Status != lifecycle.JobComplete || tr.String() != "" {
			t.Fatalf("BRIEF ran to %s (%v), middleware ran %q", j.Status, err, tr)
		}
	})
}

// TestWorkMiddlewareIgnoresCtx: a middleware that blocks without
// watching its context is left behind at the type's Timeout, as a
// handler is: the attempt fails TIMEOUT on the fake clock's deadline.
func TestWorkMiddlewareIgnoresCtx(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	release := make(chan struct{})
	defer close(release)
	stuck := func(next jobqueue.Handler) jobqueue.Handler {
		return jobqueue.HandlerFunc(func(ctx context.Context, j lifecycle.Job) (lifecycle.JobOutput, error) {
			<-release // ignores ctx
			return next.Work(ctx, j)
		})
	}
	q := newQueue(t, memstore.New(), clk, func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent), Timeout: 5 * time.Second}}
		c.WorkMiddleware = []func(jobqueue.Handler) jobqueue.Handler{stuck}
		c.LeaseTTL = time.Hour // no heartbeat before the deadline
	})
	enqueueEmail(t, q, "job-1", 3)
	j := runToDeadline(t, clk, claim(t, q, "w1"), 5*time.Second)
	if j.Status != lifecycle.JobRetryBackoff || j.ErrorCode != codes.JobTimeout {
		t.Fatalf("%s %s, want RETRY_BACKOFF TIMEOUT at the type's 5 s", j.Status, j.ErrorCode)
	}
	if live, _ := q.Stragglers(); live != 1 {
		t.Errorf("%d stragglers, want the middleware that ignores ctx left behind", live)
	}
}

// runToDeadline runs c in a goroutine and, once the claim has set its
// two timers (the handler's deadline and the heartbeat), moves the fake
// clock by d; it returns the job as the run left it, failing the test if
// the run is still going a while after (its deadline is not at d).
func runToDeadline(t *testing.T, clk *clock.Fake, c *jobqueue.Claim, d time.Duration) lifecycle.Job {
	t.Helper()
	done := make(chan lifecycle.Job, 1)
	started := clk.WaitForTimers(clk.Pending() + 2)
	go func() {
		j, err := c.Run(context.Background(), nil)
		if err != nil {
			t.Error(err)
		}
		done <- j
	}()
	<-started
	clk.Advance(d)
	select {
	case j := <-done:
		return j
	case <-time.After(10 * time.Second):
		t.Fatalf("the attempt did not end %s on", d)
		return lifecycle.Job{}
	}
}

// BenchmarkInsertMiddleware is the cost of the insert middleware on
// memstore: Insert with none, and with two that call on.
func BenchmarkInsertMiddleware(b *testing.B) {
	pass := func(next jobqueue.InsertFunc) jobqueue.InsertFunc {
		return func(ctx context.Context, jobs []jobqueue.NewJob) ([]lifecycle.Job, error) { return next(ctx, jobs) }
	}
	for _, n := range []int{0, 2} {
		b.Run(fmt.Sprintf("middleware=%d", n), func(b *testing.B) {
			q := newQueue(b, memstore.New(), clock.Real(), func(c *jobqueue.Config) {
				c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: jobqueue.HandlerFunc(sent)}}
				for range n {
					c.InsertMiddleware = append(c.InsertMiddleware, pass)
				}
			})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := q.Insert(ctx, emailType, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
