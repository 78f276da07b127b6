package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/faultstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// receiver is a callback receiver on 127.0.0.1: it answers the n-th post
// (from 1) with status(n) and keeps the bodies.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []jobqueue.CallbackBody
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var b jobqueue.CallbackBody
		if err := json.NewDecoder(req.Body).Decode(&b); err != nil || req.Method != http.MethodPost {
			http.Error(w, "bad callback", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, b)
		n := len(r.bodies)
		r.mu.Unlock()
		w.WriteHeader(status(n))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []jobqueue.CallbackBody {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bodies)
}

func always(code int) func(int) int { return func(int) int { return code } }

// cbQueue is a Queue over s whose one user type, SEND_EMAIL, runs h.
func cbQueue(t *testing.T, s *storage.Store, clk clock.Clock, h jobqueue.Handler, mod ...func(*jobqueue.Config)) *jobqueue.Queue {
	t.Helper()
	return newQueue(t, s, clk, append([]func(*jobqueue.Config){func(c *jobqueue.Config) {
		c.Types = map[lifecycle.JobType]jobqueue.TypeConfig{emailType: {Handler: h}}
	}}, mod...)...)
}

func enqueueCallback(t *testing.T, q *jobqueue.Queue, id, callback string) {
	t.Helper()
	n := jobqueue.NewJob{JobID: id, JobType: emailType, AgentSlug: "mailer", Callback: callback}
	if _, err := q.Enqueue(context.Background(), lifecycle.ActorGateway, n); err != nil {
		t.Fatal(err)
	}
}

// runJob claims the one job due and runs it.
func runJob(t *testing.T, q *jobqueue.Queue) lifecycle.Job {
	t.Helper()
	c := claim(t, q, "w1")
	if c == nil {
		t.Fatal("no job to claim")
	}
	j, err := c.Run(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func outboxKeys(t *testing.T, s *storage.Store) []string {
	t.Helper()
	var keys []string
	for k, err := range s.List(context.Background(), jobqueue.CallbacksPrefix) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	return keys
}

var callbackStores = []storeCase{{"memstore", func(testing.TB) *storage.Store { return memstore.New() }},
	{"filestore", fileStore}, {"sqlite", teststores.SQLite}}

// TestCallbackPosted: a job that ends COMPLETE, DEAD or CANCELLED has its
// callback posted once, with its artifact id or its error, and its outbox
// entry is gone; on stores that commit and stores that do not.
func TestCallbackPosted(t *testing.T) {
	t.Parallel()
	perm := jobqueue.HandlerFunc(func(context.Context, lifecycle.Job) (lifecycle.JobOutput, error) {
		return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("no such address"))
	})
	tests := []struct {
		name     string
		h        jobqueue.Handler
		end      func(t *testing.T, q *jobqueue.Queue) lifecycle.Job
		want     lifecycle.JobState
		wantCode string // the job's error_code
	}{
		{"COMPLETE", jobqueue.HandlerFunc(sent), runJob, lifecycle.JobComplete, ""},
		{"DEAD", perm, runJob, lifecycle.JobDead, codes.JobPermanent},
		{"CANCELLED", perm, func(t *testing.T, q *jobqueue.Queue) lifecycle.Job {
			j, err := q.Cancel(context.Background(), lifecycle.ActorAdmin, "job-cb")
			if err != nil {
				t.Fatal(err)
			}
			return j
		}, lifecycle.JobCancelled, codes.JobCancelled},
	}
	for _, sc := range callbackStores {
		for _, tt := range tests {
			t.Run(sc.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s := sc.new(t)
				rcv := newReceiver(t, always(http.StatusNoContent))
				q := cbQueue(t, s, clock.NewFake(t0), tt.h)
				enqueueCallback(t, q, "job-cb", rcv.URL+"/jobs/job-cb/result")
				j := tt.end(t, q)
				if j.Status != tt.want || j.ErrorCode != tt.wantCode {
					t.Fatalf("ended %s, want %s", j.Status, tt.want)
				}
				if len(rcv.got()) != 0 {
					t.Fatal("posted before the sender ran")
				}
				jobqueue.SendCallbacks(ctx, q, "w1")
				jobqueue.SendCallbacks(ctx, q, "w1") // nothing more to send
				got := rcv.got()
				if len(got) != 1 {
					t.Fatalf("%d posts, want 1: %+v", len(got), got)
				}
				b := got[0]
				if b.JobID != "job-cb" || b.Status != tt.want || b.ErrorCode != j.ErrorCode || b.JobType != emailType ||
					b.ArtifactID != j.ArtifactID || (tt.want == lifecycle.JobComplete) != (b.ArtifactID != "") || !b.FinishedAt.Equal(j.UpdatedAt) {
					t.Errorf("posted %+v, for the job %s %q artifact %q at %s", b, j.Status, j.ErrorCode, j.ArtifactID, j.UpdatedAt)
				}
				if tt.want == lifecycle.JobDead && !strings.Contains(b.Error, "no such address") {
					t.Errorf("error %q, want the attempt's", b.Error)
				}
				if keys := outboxKeys(t, s); len(keys) != 0 {
					t.Errorf("outbox holds %v after the post", keys)
				}
			})
		}
	}
}

// TestCallbackRetriedThenGivenUp: a receiver that fails is tried again
// after the backoff, doubling, until CallbackAttempts, then the callback is
// given up with a job.callback.failed audit event and its entry deleted;
// one that recovers in time gets the callback and no failure is recorded.
func TestCallbackRetriedThenGivenUp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    func(n int) int
		wantPosts int
		wantFail  bool
	}{
		{"always failing", always(http.StatusInternalServerError), 3, true},
		{"a redirect is a failure", always(http.StatusFound), 3, true},
		{"recovers at the last attempt", func(n int) int {
			if n < 3 {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}, 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := memstore.New()
			clk := clock.NewFake(t0)
			rcv := newReceiver(t, tt.status)
			q := cbQueue(t, s, clk, jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
				c.CallbackAttempts, c.CallbackBackoff = 3, time.Second
			})
			enqueueCallback(t, q, "job-cb", rcv.URL)
			runJob(t, q)
			// The posts come at 0 s, 1 s and 3 s; a pass between finds
			// nothing due.
			for i, wait := range []time.Duration{0, time.Second, 2 * time.Second} {
				clk.Advance(wait - time.Millisecond)
				if wait > 0 {
					jobqueue.SendCallbacks(ctx, q, "w1")
					if n := len(rcv.got()); n != i {
						t.Fatalf("%d posts %s early, want %d", n, time.Millisecond, i)
					}
				}
				clk.Advance(time.Millisecond)
				jobqueue.SendCallbacks(ctx, q, "w1")
				if n := len(rcv.got()); n != i+1 {
					t.Fatalf("%d posts after attempt %d", n, i+1)
				}
			}
			clk.Advance(time.Hour)
			jobqueue.SendCallbacks(ctx, q, "w1")
			if n := len(rcv.got()); n != tt.wantPosts {
				t.Errorf("%d posts, want %d", n, tt.wantPosts)
			}
			if keys := outboxKeys(t, s); len(keys) != 0 {
				t.Errorf("outbox holds %v", keys)
			}
			failed := 0
			for e, err := range q.JobEventsForTest(ctx, "job-cb") {
				if err != nil {
					t.Fatal(err)
				}
				if e.Event == "job.callback.failed" {
					failed++
				}
			}
			if (failed == 1) != tt.wantFail || failed > 1 {
				t.Errorf("%d job.callback.failed events, want one: %v", failed, tt.wantFail)
			}
		})
	}
}

// TestCallbackAfterKill: a Worker killed after the job's terminal write,
// before its sender posted (here: the first Queue never runs a sender),
// leaves the entry, and another process sharing the store posts it.
func TestCallbackAfterKill(t *testing.T) {
	t.Parallel()
	for _, sc := range callbackStores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := sc.new(t)
			rcv := newReceiver(t, always(http.StatusOK))
			a := cbQueue(t, s, clock.NewFake(t0), jobqueue.HandlerFunc(sent))
			enqueueCallback(t, a, "job-cb", rcv.URL)
			j := runJob(t, a)
			if keys := outboxKeys(t, s); len(keys) != 1 {
				t.Fatalf("outbox holds %v after the job ended, want its entry", keys)
			}
			b := cbQueue(t, s, clock.NewFake(t0), jobqueue.HandlerFunc(sent))
			jobqueue.SendCallbacks(ctx, b, "w2")
			if got := rcv.got(); len(got) != 1 || got[0].ArtifactID != j.ArtifactID || got[0].ArtifactID == "" {
				t.Fatalf("posts %+v, want one with artifact %q", got, j.ArtifactID)
			}
		})
	}
}

// keyLog is a driver that keeps every write by key, in order, and each
// commit's keys.
type keyLog struct {
	driver.Store
	mu      sync.Mutex
	singles []string   // the keys written alone
	commits [][]string // the keys of each commit
}

func (k *keyLog) Unwrap() driver.Store { return k.Store }

func (k *keyLog) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	k.note(key)
	return k.Store.Put(ctx, key, value, cond)
}

func (k *keyLog) Delete(ctx context.Context, key string, cond storage.Condition) error {
	k.note(key)
	return k.Store.Delete(ctx, key, cond)
}

func (k *keyLog) note(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.singles = append(k.singles, key)
}

func (k *keyLog) Commit(ctx context.Context, ws []storage.Write) ([]storage.Version, error) {
	cm, ok := k.Store.(driver.Committer)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	keys := make([]string, len(ws))
	for i, w := range ws {
		keys[i] = w.Key
	}
	k.mu.Lock()
	k.commits = append(k.commits, keys)
	k.mu.Unlock()
	return cm.Commit(ctx, ws)
}

// outboxWrites counts the writes of outbox entries, alone or in commits.
func (k *keyLog) outboxWrites() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, key := range slices.Concat(append(k.commits, k.singles)...) {
		if strings.HasPrefix(key, jobqueue.CallbacksPrefix) {
			n++
		}
	}
	return n
}

// TestCallbackWrites: the outbox entry of a job that ends is written in
// the commit of its terminal write on a store that commits (SQLite), and
// just before it on one that does not (filestore); a job without a
// callback writes none (checked against one with, so the count can fail).
func TestCallbackWrites(t *testing.T) {
	t.Parallel()
	for _, sc := range []storeCase{{"sqlite", teststores.SQLite}, {"filestore", fileStore}} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			base := sc.new(t)
			kl := &keyLog{Store: base}
			s := storage.New(kl)
			q := cbQueue(t, s, clock.NewFake(t0), jobqueue.HandlerFunc(sent))
			enqueueCallback(t, q, "job-none", "")
			runJob(t, q)
			if n := kl.outboxWrites(); n != 0 {
				t.Fatalf("a job without a callback wrote %d outbox entries", n)
			}
			enqueueCallback(t, q, "job-cb", "http://127.0.0.1:1/cb")
			runJob(t, q)
			if n := kl.outboxWrites(); n != 1 {
				t.Fatalf("a job with a callback wrote %d outbox entries, want 1", n)
			}
			jobKey, _ := layout.JobKey("job-cb")
			entry := jobqueue.CallbacksPrefix + "job-cb.json"
			kl.mu.Lock()
			defer kl.mu.Unlock()
			if base.CanCommit() {
				for _, c := range kl.commits {
					if slices.Contains(c, entry) && !slices.Contains(c, jobKey) {
						t.Errorf("the entry was committed without the job's write: %v", c)
					}
				}
				if slices.Contains(kl.singles, entry) {
					t.Error("the entry was written alone on a store that commits")
				}
				return
			}
			i, last := slices.Index(kl.singles, entry), -1
			for n, k := range kl.singles {
				if k == jobKey {
					last = n
				}
			}
			if i < 0 || i > last {
				t.Errorf("the entry (write %d) does not come before the job's last write (%d): %v", i, last, kl.singles)
			}
		})
	}
}

// TestCallbackHosts: with CallbackHosts set, a job naming another host is
// refused at insert, and an entry already written for one is given up
// unposted; a listed host is posted to.
func TestCallbackHosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	rcv := newReceiver(t, always(http.StatusOK))
	open := cbQueue(t, s, clock.NewFake(t0), jobqueue.HandlerFunc(sent))
	strict := cbQueue(t, s, clock.NewFake(t0), jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
		c.CallbackHosts = []string{"membridge.internal"}
	})
	for _, bad := range []string{rcv.URL, "https://evil.example/cb"} {
		_, err := strict.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobType: emailType, Callback: bad})
		if !errors.Is(err, lifecycle.ErrInvalidJob) {
			t.Errorf("callback %s: %v, want ErrInvalidJob", bad, err)
		}
	}
	if _, err := strict.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{JobType: emailType, Callback: "https://MemBridge.internal/jobs/x/result"}); err != nil {
		t.Errorf("a listed host: %v", err)
	}
	enqueueCallback(t, open, "job-cb", rcv.URL)
	runJob(t, open)
	jobqueue.SendCallbacks(ctx, strict, "w1")
	if n := len(rcv.got()); n != 0 {
		t.Errorf("%d posts to a host not listed", n)
	}
	if keys := outboxKeys(t, s); len(keys) != 0 {
		t.Errorf("outbox holds %v", keys)
	}
	if _, err := jobqueue.New(jobqueue.Config{Store: s, CallbackHosts: []string{"host:80"}}); !errors.Is(err, jobqueue.ErrInvalidConfig) {
		t.Errorf("a host with a port: %v", err)
	}
}

// TestCallbackWorker: a running Worker posts the callback of the job it
// ran, at once.
func TestCallbackWorker(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, always(http.StatusOK))
	q := cbQueue(t, memstore.New(), clock.Real(), jobqueue.HandlerFunc(sent))
	enqueueCallback(t, q, "job-cb", rcv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = (&jobqueue.Worker{Queue: q, ID: "w1", PollInterval: 10 * time.Millisecond}).Run(ctx)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(rcv.got()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got := rcv.got(); len(got) != 1 || got[0].Status != lifecycle.JobComplete {
		t.Fatalf("posts %+v, want one COMPLETE", got)
	}
}

// failEnd is a driver that refuses the write that ends the job at key
// COMPLETE, and every write of the job after it while blocked: a worker
// whose terminal write never landed, as if it died then.
type failEnd struct {
	driver.Store
	key     string
	mu      sync.Mutex
	failed  bool
	blocked bool
}

func (f *failEnd) block(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocked = on
}

func (f *failEnd) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	f.mu.Lock()
	first := !f.failed && key == f.key && strings.Contains(string(value), `"status":"COMPLETE"`)
	if first {
		f.failed, f.blocked = true, true
	}
	fail := key == f.key && f.blocked
	f.mu.Unlock()
	if fail {
		return "", errors.New("disk full")
	}
	return f.Store.Put(ctx, key, value, cond)
}

// TestCallbackEndNotLanded: on a store that cannot commit, an entry
// written before a terminal write that failed is kept while the job may
// still be written, posts nothing, and is dropped once the job moved on
// without ending; the job's real end posts once.
func TestCallbackEndNotLanded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobKey, _ := layout.JobKey("job-cb")
	fe := &failEnd{Store: fileStore(t), key: jobKey}
	s := storage.New(fe)
	clk := clock.NewFake(t0)
	rcv := newReceiver(t, always(http.StatusOK))
	q := cbQueue(t, s, clk, jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) { c.Backoff = []time.Duration{time.Second} })
	enqueueCallback(t, q, "job-cb", rcv.URL)
	if _, err := claim(t, q, "w1").Run(ctx, nil); err == nil {
		t.Fatal("the terminal write did not fail")
	}
	if keys := outboxKeys(t, s); len(keys) != 1 {
		t.Fatalf("outbox holds %v, want the entry written before the failed write", keys)
	}
	// The job is as it was before that write: its entry is kept, as the
	// write might still land, and nothing is posted.
	jobqueue.SendCallbacks(ctx, q, "w1")
	if n := len(rcv.got()); n != 0 || len(outboxKeys(t, s)) != 1 {
		t.Fatalf("%d posts for a job that has not ended; outbox %v", n, outboxKeys(t, s))
	}
	fe.block(false)
	clk.Advance(time.Hour) // the lease lapses: the sweep rescues the job
	if _, err := q.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	jobqueue.SendCallbacks(ctx, q, "w1")
	if n := len(rcv.got()); n != 0 || len(outboxKeys(t, s)) != 0 {
		t.Fatalf("%d posts, outbox %v: want the stale entry dropped unposted", n, outboxKeys(t, s))
	}
	clk.Advance(time.Hour)
	if j := runJob(t, q); j.Status != lifecycle.JobComplete {
		t.Fatalf("ran to %s", j.Status)
	}
	jobqueue.SendCallbacks(ctx, q, "w1")
	if got := rcv.got(); len(got) != 1 || got[0].Status != lifecycle.JobComplete {
		t.Fatalf("posts %+v, want the real end's", got)
	}
}

// TestCallbackOnceAcrossProcesses: the senders of two processes sharing
// the store, passing at once while the receiver is slow, post the entry
// once between them (its lease).
func TestCallbackOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	clk := clock.NewFake(t0)
	var mu sync.Mutex
	posts := 0
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}))
	t.Cleanup(slow.Close)
	a := cbQueue(t, s, clk, jobqueue.HandlerFunc(sent))
	b := cbQueue(t, s, clk, jobqueue.HandlerFunc(sent))
	enqueueCallback(t, a, "job-cb", slow.URL)
	runJob(t, a)
	var wg sync.WaitGroup
	for i, q := range []*jobqueue.Queue{a, b} {
		wg.Go(func() { jobqueue.SendCallbacks(ctx, q, "w"+string(rune('1'+i))) })
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 {
		t.Fatalf("%d posts, want 1", posts)
	}
}

// TestCallbackKeptThroughAFalseNotFound: on a store that settles and
// cannot commit, the sender reads the job an entry was written before;
// one not-found read of it drops nothing (it may be false there), and the
// callback is posted once the store answers again; a job truly gone drops
// its entry once read missing Settle later.
func TestCallbackKeptThroughAFalseNotFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	fs := faultstore.New(fileStore(t))
	fs.SetSettle(settle, clk.Now)
	fs.Match(func(k string) bool { return strings.HasPrefix(k, "jobs/") })
	s := storage.New(fs)
	rcv := newReceiver(t, always(http.StatusOK))
	q := cbQueue(t, s, clk, jobqueue.HandlerFunc(sent))
	for _, id := range []string{"job-cb", "job-gone"} {
		enqueueCallback(t, q, id, rcv.URL)
		if j := runJob(t, q); j.Status != lifecycle.JobComplete {
			t.Fatalf("ran to %s", j.Status)
		}
	}
	if err := fs.Delete(ctx, "jobs/job-gone.json", storageCond()); err != nil {
		t.Fatal(err)
	}
	fs.FalseNotFound(1)
	jobqueue.SendCallbacks(ctx, q, "w1")
	if keys := outboxKeys(t, s); fs.Faults().FalseNotFounds != 1 || len(keys) != 2 {
		t.Fatalf("%d false not-founds; outbox %v, want both entries kept after one not-found each", fs.Faults().FalseNotFounds, keys)
	}
	clk.Advance(settle)
	jobqueue.SendCallbacks(ctx, q, "w1")
	if got := rcv.got(); len(got) != 1 || got[0].JobID != "job-cb" || got[0].Status != lifecycle.JobComplete {
		t.Fatalf("posts %+v, want job-cb's end once", got)
	}
	if keys := outboxKeys(t, s); len(keys) != 0 {
		t.Fatalf("outbox %v, want empty (job-gone read missing Settle apart)", keys)
	}
}

// outboxLists is a driver that counts the listings of the outbox.
type outboxLists struct {
	driver.Store
	n atomic.Int32
}

func (o *outboxLists) Unwrap() driver.Store { return o.Store }

func (o *outboxLists) ListAfter(ctx context.Context, prefix, after string) iter.Seq2[string, error] {
	if prefix == jobqueue.CallbacksPrefix {
		o.n.Add(1)
	}
	return o.Store.ListAfter(ctx, prefix, after)
}

// TestCallbackOnePassPerQueue: while one Worker's pass of a Queue is under
// way (its post waiting on the receiver), another Worker's pass of that
// Queue returns at once without listing the outbox again, and the entry is
// posted once.
func TestCallbackOnePassPerQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lists := &outboxLists{Store: memstore.New()}
	s := storage.New(lists)
	clk := clock.NewFake(t0)
	posting, release := make(chan struct{}), make(chan struct{})
	var posts atomic.Int32
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		if posts.Add(1) == 1 {
			close(posting)
		}
		<-release
	}))
	t.Cleanup(slow.Close)
	q := cbQueue(t, s, clk, jobqueue.HandlerFunc(sent))
	enqueueCallback(t, q, "job-cb", slow.URL)
	runJob(t, q)
	first := make(chan struct{})
	go func() { defer close(first); jobqueue.SendCallbacks(ctx, q, "w1") }()
	<-posting
	second := make(chan struct{})
	go func() { defer close(second); jobqueue.SendCallbacks(ctx, q, "w2") }()
	select {
	case <-second:
	case <-time.After(5 * time.Second):
		t.Error("the second Worker's pass waited for the first's")
	}
	close(release)
	<-first
	<-second
	if n, p := lists.n.Load(), posts.Load(); n != 1 || p != 1 {
		t.Fatalf("%d listings of the outbox, %d posts; want 1 and 1", n, p)
	}
}

// TestCallbackWaitCapped: the doubling wait between attempts stops at a
// day, so many attempts of a long backoff never come due at once (the
// doubled wait overflowing into a negative one).
func TestCallbackWaitCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(t0)
	rcv := newReceiver(t, always(http.StatusInternalServerError))
	q := cbQueue(t, memstore.New(), clk, jobqueue.HandlerFunc(sent), func(c *jobqueue.Config) {
		c.CallbackAttempts, c.CallbackBackoff = 40, 10*time.Second
	})
	enqueueCallback(t, q, "job-cb", rcv.URL)
	runJob(t, q)
	for i := range 35 {
		next := jobqueue.SendCallbacks(ctx, q, "w1")
		if wait := next.Sub(clk.Now()); wait <= 0 || wait > 24*time.Hour {
			t.Fatalf("after attempt %d the next is %s away, want within (0, 24h]", i+1, wait)
		}
		clk.Advance(next.Sub(clk.Now()))
	}
	if n := len(rcv.got()); n != 35 {
		t.Fatalf("%d attempts, want 35", n)
	}
}

// TestCallbackBacklogNotListedPerEnd: while a receiver is down and 5
// entries wait out their backoff, a job that ends with a callback is
// posted by a pass that does not list the outbox again; the pass after
// the listing period (or when an entry falls due) lists it.
func TestCallbackBacklogNotListedPerEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lists := &outboxLists{Store: memstore.New()}
	clk := clock.NewFake(t0)
	down := newReceiver(t, always(http.StatusInternalServerError))
	up := newReceiver(t, always(http.StatusOK))
	q := cbQueue(t, storage.New(lists), clk, jobqueue.HandlerFunc(sent))
	for i := range 5 {
		enqueueCallback(t, q, fmt.Sprintf("job-down-%d", i), down.URL)
		runJob(t, q)
	}
	jobqueue.SendCallbacks(ctx, q, "w1") // lists, fails each once: backlog
	before := lists.n.Load()
	enqueueCallback(t, q, "job-up", up.URL)
	runJob(t, q)
	jobqueue.SendCallbacks(ctx, q, "w1")
	if n := lists.n.Load() - before; n != 0 || len(up.got()) != 1 {
		t.Fatalf("a job's end beside a backlog: %d listings, %d posts; want 0 and 1", n, len(up.got()))
	}
	if n := len(down.got()); n != 5 {
		t.Fatalf("the backlog was posted %d times, want 5 (not before its backoff)", n)
	}
	clk.Advance(time.Minute)
	jobqueue.SendCallbacks(ctx, q, "w1")
	if n := lists.n.Load() - before; n != 1 {
		t.Fatalf("%d listings after the period, want 1", n)
	}
}
