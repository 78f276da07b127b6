package main

// The harness of the process-level scenarios of issue 27 (crash_test.go,
// cluster_test.go): clients that submit with idempotency keys and retry
// as real clients do, a ledger of every answer, and the checks of what
// was acknowledged.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/client"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// scenarioEnv turns on the scenarios too long for the README's test
// command, each on a 4-node MinIO cluster: .ci/run runs the cluster
// scenario as a step of its own.
const scenarioEnv = "CONVEYOR_CLUSTER_SCENARIO"

// gate skips t unless scenarioEnv is set, saying why it is kept apart.
func gate(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(scenarioEnv) == "" {
		t.Skipf("%s; set %s=1 to run it", why, scenarioEnv)
	}
}

// retryEvery is how long a client waits before sending the same submit
// again after a connection error or a passing refusal.
const retryEvery = 200 * time.Millisecond

// ack is one acknowledged (2xx) submit answer.
type ack struct {
	runID string
	dup   bool
	// missing: the run read 404 through another reader right after, and
	// again until the store's settle time had passed.
	missing bool
	// late: it read 404 right after, then was found within the settle
	// time (a false not-found the store's fault model allows).
	late bool
}

// ledger records every answer the clients got.
type ledger struct {
	mu      sync.Mutex
	acks    map[string][]ack // by idempotency key
	order   []string         // acknowledged run ids, in the order of their first acknowledgment
	answers map[int]int      // by HTTP status; 0: connection error
	bad     []string         // answers no client may get: 500s, unexpected refusals
	acked   atomic.Int64
}

func newLedger() *ledger { return &ledger{acks: map[string][]ack{}, answers: map[int]int{}} }

func (l *ledger) answer(status int) {
	l.mu.Lock()
	l.answers[status]++
	l.mu.Unlock()
}

func (l *ledger) badAnswer(format string, args ...any) {
	l.mu.Lock()
	l.bad = append(l.bad, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// retryable says whether a client sends the same submit again after err:
// a connection error, a 5xx, or 409 IDEMPOTENCY_IN_PROGRESS (the key's
// first submit is still running). The status is 0 for a connection error.
func retryable(err error) (status int, again bool) {
	var apiErr *client.Error
	if !errors.As(err, &apiErr) {
		return 0, true
	}
	return apiErr.Status, apiErr.Status >= 500 || apiErr.Status == http.StatusConflict || apiErr.Status == http.StatusTooManyRequests
}

// submitLoad is a burst of submits, one key each, from concurrent clients.
type submitLoad struct {
	keys    int
	clients int
	agent   string
	prefix  string // of the keys
	// workers are the Workers clients submit to; a client moves to the
	// next one after a connection error (as behind a balancer).
	workers []*client.Client
	// reader reads a run right after its acknowledgment: a client of
	// another process than the one that answered (one per worker, by
	// index).
	reader func(worker int) *client.Client
	// settle is the store's settle time: how long an acknowledged run may
	// read 404 before it counts as missing (0: not at all).
	settle time.Duration
	l      *ledger
}

func (ld *submitLoad) key(i int) string { return fmt.Sprintf("%s-%d", ld.prefix, i) }

// run submits every key, retrying each every retryEvery until it is
// acknowledged, refused for good or ctx ends.
func (ld *submitLoad) run(ctx context.Context) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := range ld.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= ld.keys || ctx.Err() != nil {
					return
				}
				ld.submit(ctx, c, ld.key(i))
			}
		})
	}
	wg.Wait()
}

func (ld *submitLoad) submit(ctx context.Context, c int, key string) {
	w := c % len(ld.workers)
	for ctx.Err() == nil {
		res, err := ld.workers[w].Submit(ctx, lifecycle.SubmitRequest{AgentSlug: ld.agent, IdempotencyKey: key})
		if err == nil {
			ld.l.answer(http.StatusOK)
			a := ack{runID: res.RunID, dup: res.Duplicate}
			a.missing, a.late = ld.missing(ctx, w, res.RunID)
			ld.l.mu.Lock()
			ld.l.acks[key] = append(ld.l.acks[key], a)
			ld.l.order = append(ld.l.order, a.runID)
			ld.l.mu.Unlock()
			ld.l.acked.Add(1)
			return
		}
		status, again := retryable(err)
		ld.l.answer(status)
		if status == http.StatusInternalServerError {
			ld.l.badAnswer("key %s: %v", key, err)
		}
		if !again {
			ld.l.badAnswer("key %s refused: %v", key, err)
			return
		}
		if status == 0 {
			w = (w + 1) % len(ld.workers)
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryEvery):
		}
	}
}

// missing reads runID through another process right after it was
// acknowledged: missing when that process answers 404 RUN_NOT_FOUND and
// goes on answering it for the store's settle time (ld.settle; 0: the
// first 404 is believed), late when a 404 gave way within it. On a
// cluster a node killed with the drives that hold a fresh object's
// quorum makes every node answer 404 for it until the node is back
// (docs/stores.md): the run exists, and so does the fault. A reader that
// cannot answer (it is being restarted) is asked again.
func (ld *submitLoad) missing(ctx context.Context, w int, runID string) (missing, late bool) {
	var first time.Time
	for i := 0; i < 50 || !first.IsZero(); i++ {
		_, err := ld.reader(w).Status(ctx, runID)
		var apiErr *client.Error
		switch {
		case err == nil:
			return false, !first.IsZero()
		case errors.As(err, &apiErr) && apiErr.Code == codes.RunNotFound:
			if first.IsZero() {
				first = time.Now()
			}
			if time.Since(first) >= ld.settle {
				return true, false
			}
		case ctx.Err() != nil:
			return false, false
		}
		time.Sleep(retryEvery)
	}
	return false, false
}

// verdict is what the checks found.
type verdict struct {
	acked, duplicates, missingAtAnswer int
	missingAt                          []string // key -> run, for the missing at answer
	lateAt                             []string // key -> run, read 404 then found within the settle time
	neverExisted, notCompleted         []string
	completed                          map[string]bool // acknowledged runs read completed
	twoRuns                            []string        // keys answered with, or holding, two runs
	executedTwice                      []string        // keys with two runs that executed
}

// check reads every acknowledged run until it completes (or no run ends for
// stall), and every run of the agent, through reader.
func (ld *submitLoad) check(ctx context.Context, reader *client.Client, stall time.Duration) (verdict, error) {
	v := verdict{completed: map[string]bool{}}
	runs := map[string]string{} // run id -> key
	ld.l.mu.Lock()
	for key, as := range ld.l.acks {
		ids := map[string]bool{}
		for _, a := range as {
			v.acked++
			ids[a.runID] = true
			runs[a.runID] = key
			if a.dup {
				v.duplicates++
			}
			if a.missing {
				v.missingAtAnswer++
				v.missingAt = append(v.missingAt, fmt.Sprintf("%s-%s -> %s (duplicate %v)", ld.prefix, key, a.runID, a.dup))
			}
			if a.late {
				v.lateAt = append(v.lateAt, fmt.Sprintf("%s-%s -> %s", ld.prefix, key, a.runID))
			}
		}
		if len(ids) > 1 {
			v.twoRuns = append(v.twoRuns, fmt.Sprintf("%s answered %d runs", key, len(ids)))
		}
	}
	ld.l.mu.Unlock()
	ended := waitAllEnded(ctx, reader, runs, stall)
	for id, key := range runs {
		st, ok := ended[id]
		switch {
		case ok && st.RunID == "":
			v.neverExisted = append(v.neverExisted, key+" -> "+id)
		case !ok || st.Status != "completed":
			v.notCompleted = append(v.notCompleted, fmt.Sprintf("%s -> %s: %q", key, id, st.Status))
		default:
			v.completed[id] = true
		}
	}
	all, _, err := reader.Runs(ctx, client.Query{Agent: ld.agent, All: true})
	if err != nil {
		return v, fmt.Errorf("listing runs: %w", err)
	}
	byKey := map[string][]lifecycle.RunStatus{}
	for _, st := range all {
		if _, k, ok := strings.Cut(st.IdempotencyKey, ":"+ld.prefix+"-"); ok {
			byKey[k] = append(byKey[k], st)
		}
	}
	for k, sts := range byKey {
		executed := 0
		for _, st := range sts {
			if st.StepsCompleted > 0 || st.Status == "completed" {
				executed++
			}
		}
		if len(sts) > 1 {
			v.twoRuns = append(v.twoRuns, fmt.Sprintf("%s-%s holds %d runs", ld.prefix, k, len(sts)))
		}
		if executed > 1 {
			v.executedTwice = append(v.executedTwice, fmt.Sprintf("%s-%s executed %d runs", ld.prefix, k, executed))
		}
	}
	return v, nil
}

// waitAllEnded reads the status of every run of runs in rounds until each
// is terminal, or until no run has ended for stall (stuck), or for at most
// ten stalls in all: it returns the terminal ones, and the runs still read
// 404 at the end with an empty status (on a store that settles a 404 may be
// false, so it is read again until then). Progress, not a fixed deadline,
// decides: on a loaded machine a cluster finishes 300 runs in minutes.
func waitAllEnded(ctx context.Context, c *client.Client, runs map[string]string, stall time.Duration) map[string]lifecycle.RunStatus {
	ctx, cancel := context.WithTimeout(ctx, 10*stall)
	defer cancel()
	ended := map[string]lifecycle.RunStatus{}
	missing := map[string]bool{}
	progress := time.Now()
	for {
		for id := range runs {
			if _, ok := ended[id]; ok {
				continue
			}
			st, err := c.Status(ctx, id)
			missing[id] = isNotFound(err)
			if err == nil && (st.Status == "completed" || st.Status == "failed" || st.Status == "cancelled") {
				ended[id] = st
				progress = time.Now()
			}
		}
		if len(ended) == len(runs) || ctx.Err() != nil || time.Since(progress) > stall {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	for id := range runs {
		if _, ok := ended[id]; !ok && missing[id] {
			ended[id] = lifecycle.RunStatus{}
		}
	}
	return ended
}

func isNotFound(err error) bool {
	var apiErr *client.Error
	return errors.As(err, &apiErr) && apiErr.Code == codes.RunNotFound
}

// report logs the ledger and the verdict and fails t for each broken
// promise.
func (ld *submitLoad) report(t *testing.T, v verdict) {
	t.Helper()
	ld.l.mu.Lock()
	defer ld.l.mu.Unlock()
	var statuses []string
	for s, n := range ld.l.answers {
		statuses = append(statuses, fmt.Sprintf("%d:%d", s, n))
	}
	sort.Strings(statuses)
	t.Logf("%d keys: %d acknowledged answers (%d duplicate:true), answers by status (0: connection error) %v",
		ld.keys, v.acked, v.duplicates, statuses)
	fail := func(what string, items []string) {
		if len(items) > 0 {
			sort.Strings(items)
			t.Errorf("%s: %d, e.g. %s", what, len(items), strings.Join(items[:min(5, len(items))], "; "))
		}
	}
	if v.missingAtAnswer > 0 {
		t.Errorf("acknowledged answers naming a run that read 404 right after and through the settle time (%v): %d of %d, e.g. %s",
			ld.settle, v.missingAtAnswer, v.acked, strings.Join(v.missingAt[:min(5, len(v.missingAt))], "; "))
	}
	if len(v.lateAt) > 0 {
		t.Logf("acknowledged runs read 404 right after, then found within the settle time (false not-founds of the store): %d, e.g. %s",
			len(v.lateAt), strings.Join(v.lateAt[:min(5, len(v.lateAt))], "; "))
	}
	fail("acknowledged runs that never existed", v.neverExisted)
	fail("acknowledged runs that did not complete", v.notCompleted)
	fail("keys with two runs", v.twoRuns)
	fail("keys with two executed runs", v.executedTwice)
	fail("answers no client may get (500, refusals)", ld.l.bad)
	if v.acked < ld.keys {
		t.Errorf("only %d of %d keys acknowledged", len(ld.l.acks), ld.keys)
	}
}

// auditGaps reads the audit log of today and yesterday from s: the runs
// of runIDs that completed without a "completed" event, and the jobs of
// jobIDs whose COMPLETE events do not number exactly one.
func auditGaps(ctx context.Context, s *storage.Store, runIDs, jobIDs map[string]bool) (runGaps, jobGaps []string, err error) {
	runDone := map[string]int{}
	jobDone := map[string]int{}
	now := time.Now().UTC()
	for _, day := range []time.Time{now.AddDate(0, 0, -1), now} {
		for ev, err := range records.ReadAuditDay(ctx, s, day) {
			if err != nil {
				return nil, nil, err
			}
			switch {
			case ev.JobID != "" && ev.To == string(lifecycle.JobComplete):
				jobDone[ev.JobID]++
			case ev.JobID == "" && ev.RunID != "" && ev.To == "completed":
				runDone[ev.RunID]++
			}
		}
	}
	for id := range runIDs {
		if runDone[id] == 0 {
			runGaps = append(runGaps, id)
		}
	}
	for id := range jobIDs {
		if jobDone[id] != 1 {
			jobGaps = append(jobGaps, fmt.Sprintf("%s: %d COMPLETE events", id, jobDone[id]))
		}
	}
	return runGaps, jobGaps, nil
}
