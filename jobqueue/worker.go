package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Worker runs jobs from a Queue: Slots loops, each claiming a job, running
// it and claiming the next. Without work a loop waits until the Queue has
// an agent due (work this process enqueued wakes it at once) or
// PollInterval passes; the worker sweeps the queue every SweepInterval.
type Worker struct {
	// Queue to run. Required.
	Queue *Queue
	// ID names the worker in leases; unique among the workers sharing the
	// store. Required.
	ID string
	// Handlers run the pipeline. Required.
	Handlers Handlers
	// Slots is how many jobs the worker runs at once (of different agents:
	// an agent runs one job at a time). Default 1.
	Slots int
	// PollInterval is the longest wait after finding no work: how soon work
	// enqueued by other processes is found. Default 1 s.
	PollInterval time.Duration
	// SweepInterval is how often the workers sharing the store sweep the
	// queue: each worker calls Queue.SweepIfDue this often, and one sweep
	// per interval runs among them all. Negative disables it. Default 1 min.
	SweepInterval time.Duration
}

// Run works until ctx is done, then returns nil. A job running at that
// moment sees its handlers' context cancelled, which counts as a failed
// attempt: it goes to RETRY_BACKOFF like any other failure.
func (w *Worker) Run(ctx context.Context) error {
	if w.Queue == nil || w.ID == "" || w.Handlers.CallNotebookLM == nil {
		return errors.New("jobqueue: Worker needs Queue, ID and Handlers.CallNotebookLM")
	}
	if err := storage.ValidateID("worker id", w.ID); err != nil {
		return err
	}
	slots := max(w.Slots, 1)
	poll := w.PollInterval
	if poll <= 0 {
		poll = time.Second
	}
	sweep := w.SweepInterval
	if sweep == 0 {
		sweep = time.Minute
	}
	var wg sync.WaitGroup
	for range slots {
		wg.Go(func() { w.loop(ctx, poll) })
	}
	if sweep > 0 {
		wg.Go(func() {
			for w.sleep(ctx, sweep, nil) {
				if _, _, err := w.Queue.SweepIfDue(ctx, w.ID, sweep); err != nil && ctx.Err() == nil {
					w.Queue.log.WarnContext(ctx, "jobqueue: sweep", "worker", w.ID, "err", err)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// sleep waits d, or less if wake is closed (a nil wake never is). It
// returns false when ctx is done.
func (w *Worker) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := w.Queue.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
	case <-wake:
	}
	return true
}

// waitWork waits until an agent of the Queue is due, this process
// enqueues work, or poll passes (work other processes enqueue is found by
// polling). It returns false when ctx is done.
func (w *Worker) waitWork(ctx context.Context, poll time.Duration) bool {
	due, wake := w.Queue.nextDue()
	d := poll
	if !due.IsZero() {
		d = min(d, max(due.Sub(w.Queue.clock.Now()), 0))
	}
	return w.sleep(ctx, d, wake)
}

func (w *Worker) loop(ctx context.Context, poll time.Duration) {
	for ctx.Err() == nil {
		c, err := w.Queue.Claim(ctx, w.ID)
		if err != nil && ctx.Err() == nil {
			w.Queue.log.WarnContext(ctx, "jobqueue: claim", "worker", w.ID, "err", err)
		}
		if c == nil {
			if !w.waitWork(ctx, poll) {
				return
			}
			continue
		}
		if _, err := c.Run(ctx, w.Handlers); err != nil && ctx.Err() == nil {
			w.Queue.log.WarnContext(ctx, "jobqueue: run", "worker", w.ID, "job_id", c.Job().JobID, "err", err)
		}
	}
}

// SweepReport counts what Sweep repaired.
type SweepReport struct {
	Jobs    int // jobs read
	Rescued int // orphans moved to RETRY_BACKOFF
	Relaned int // lane entries recreated
	Buried  int // FAILED jobs moved to DEAD
}

// Sweep is the slow repair pass behind the fast paths, for what a worker
// that died between two writes can leave: it reads every job and rescues
// orphans whose lease expired (when no claim on their agent's lock did),
// recreates missing ready-lane entries, buries FAILED jobs and re-emits
// missing audit events of each job's last write. It costs a scan of the
// jobs, so workers run it rarely (Worker.SweepInterval).
func (q *Queue) Sweep(ctx context.Context) (SweepReport, error) {
	var r SweepReport
	for d, err := range q.docs(ctx) {
		if err != nil {
			return r, err
		}
		r.Jobs++
		q.ensureAudited(ctx, &d)
		now := q.clock.Now()
		switch {
		case pipelineState(d.Status) && (d.Lease == nil || !now.Before(d.Lease.ExpiresAt)):
			if err := q.rescue(ctx, d.JobID, 0); err != nil {
				return r, err
			}
			r.Rescued++
		case (d.Status == JobQueued || d.Status == JobRetryBackoff) && d.ReadyKey != "":
			_, _, err := q.store.Get(ctx, d.ReadyKey)
			if errors.Is(err, storage.ErrNotFound) {
				at, _, ok := parseLaneKey(d.ReadyKey)
				if !ok {
					return r, fmt.Errorf("jobqueue: job %s has a malformed ready key %q", d.JobID, d.ReadyKey)
				}
				if err := q.putLane(ctx, d.ReadyKey, d.JobID, at); err != nil {
					return r, err
				}
				q.agent(d.AgentSlug).forget()
				r.Relaned++
			} else if err != nil {
				return r, err
			}
		case d.Status == JobFailed:
			if _, err := q.bury(ctx, d.JobID, nil, ""); err != nil {
				return r, err
			}
			r.Buried++
		}
	}
	return r, nil
}

// sweepKey holds the sweep lease: who swept last and until when no other
// worker need sweep. It sits in a folder of its own so that it is never
// taken for a job (jobs/{id}.json).
const sweepKey = "jobs/sweep/lease.json"

// sweepLease is the value of sweepKey.
type sweepLease struct {
	storage.Meta
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expires_at"`
}

var errSweptRecently = errors.New("swept recently")

// SweepIfDue runs Sweep unless a worker sharing the store has swept within
// every: it takes the sweep lease (create-only, or compare-and-swap of an
// expired one) for every, and only the worker that takes it sweeps. So N
// workers calling it every minute cost one scan of the jobs a minute, not
// N. The lease is not given back: its expiry spaces the sweeps, and a worker
// that dies while sweeping is followed by the next one after every. swept
// tells whether this call swept.
func (q *Queue) SweepIfDue(ctx context.Context, worker string, every time.Duration) (r SweepReport, swept bool, err error) {
	if err := storage.ValidateID("worker id", worker); err != nil {
		return r, false, err
	}
	if every <= 0 {
		return r, false, fmt.Errorf("jobqueue: sweep interval %s is not positive", every)
	}
	now := q.clock.Now().UTC()
	lease := sweepLease{Owner: worker, ExpiresAt: now.Add(every)}
	_, err = storage.Create(ctx, q.store, sweepKey, &lease)
	if errors.Is(err, storage.ErrPreconditionFailed) {
		_, _, err = storage.Update(ctx, q.store, sweepKey, func(l *sweepLease) error {
			if now.Before(l.ExpiresAt) {
				return errSweptRecently
			}
			l.Owner, l.ExpiresAt = worker, lease.ExpiresAt
			return nil
		})
		if errors.Is(err, errSweptRecently) {
			return r, false, nil
		}
	}
	if err != nil {
		return r, false, err
	}
	r, err = q.Sweep(ctx)
	return r, true, err
}

// ReplayError reports an audit log that does not replay.
type ReplayError struct {
	JobID   string
	EventID string
	Problem string
}

// Error renders the job, the event and the problem.
func (e *ReplayError) Error() string {
	return fmt.Sprintf("jobqueue: audit replay of job %s at event %s: %s", e.JobID, e.EventID, e.Problem)
}

// ReplayAudit reads the job events of the audit log for the UTC days from
// first to last (inclusive) and replays each job's transitions through the
// job machine: the first must create the job in PENDING, each next one must
// start where the last ended, be a move of the table and be made by one of
// its actors. It returns each job's final state, or a *ReplayError.
func ReplayAudit(ctx context.Context, s storage.Store, first, last time.Time) (map[string]JobState, error) {
	byJob := map[string][]storage.AuditEvent{}
	for day := first.UTC().Truncate(24 * time.Hour); !day.After(last.UTC()); day = day.Add(24 * time.Hour) {
		for e, err := range storage.ReadAuditDay(ctx, s, day) {
			if err != nil {
				return nil, err
			}
			if e.JobID == "" || !strings.HasPrefix(e.Event, "job.") {
				continue
			}
			byJob[e.JobID] = append(byJob[e.JobID], e)
		}
	}
	m := JobMachine()
	out := make(map[string]JobState, len(byJob))
	for id, evs := range byJob {
		slices.SortFunc(evs, func(a, b storage.AuditEvent) int { return strings.Compare(a.ID, b.ID) })
		var state JobState
		for i, e := range evs {
			from, to := JobState(e.From), JobState(e.To)
			if i == 0 {
				if from != "" || to != JobPending {
					return nil, &ReplayError{id, e.ID, fmt.Sprintf("first event %q → %q does not create the job in PENDING", from, to)}
				}
				state = to
				continue
			}
			if from != state {
				return nil, &ReplayError{id, e.ID, fmt.Sprintf("event starts in %q but the job was in %q", from, state)}
			}
			t, ok := m.Edge(from, to)
			if !ok {
				return nil, &ReplayError{id, e.ID, fmt.Sprintf("%q → %q is not a move of the job machine", from, to)}
			}
			if !slices.Contains(t.Actors, lifecycle.Actor(e.Actor)) {
				return nil, &ReplayError{id, e.ID, fmt.Sprintf("actor %q may not move %q → %q", e.Actor, from, to)}
			}
			state = to
		}
		out[id] = state
	}
	return out, nil
}
