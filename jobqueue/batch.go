package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/tracing"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// enqueueMany is Queue.EnqueueMany: every job checked before any write,
// then one commit where the store commits, else one job at a time.
func (q *admission) enqueueMany(ctx context.Context, actor lifecycle.Actor, jobs []NewJob) ([]lifecycle.Job, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	if err := codes.CheckBatch("jobs", len(jobs)); err != nil {
		return nil, fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
	}
	if err := authority.Check(actor, authority.Jobs, authority.Create, authority.Scope{}); err != nil {
		return nil, err
	}
	jobs = slices.Clone(jobs) // validate fills in ids and defaults: the caller's stay as given
	first := make(map[string]int, len(jobs))
	for i := range jobs {
		if err := namedID(ctx, jobs[i].JobID); err != nil {
			return nil, &lifecycle.BatchError{Index: i, Err: err}
		}
		if err := jobs[i].validate(q.maxAttemptsOf(jobs[i].JobType), q.userTypes); err != nil {
			return nil, &lifecycle.BatchError{Index: i, Err: err}
		}
		if err := q.hosts.allow(jobs[i].Callback); err != nil {
			return nil, &lifecycle.BatchError{Index: i, Err: err}
		}
		if err := q.checkRolling(&jobs[i]); err != nil {
			return nil, &lifecycle.BatchError{Index: i, Err: err}
		}
		if jobs[i].Unique != nil {
			continue // no id yet: derived from its uniqueness (unique.go)
		}
		if j, dup := first[jobs[i].JobID]; dup {
			return nil, &lifecycle.BatchError{Index: i, Err: badJob("job_id %q is job %d's too", jobs[i].JobID, j)}
		}
		first[jobs[i].JobID] = i
	}
	if !q.store.CanCommit() {
		return q.oneByOne(ctx, actor, jobs)
	}
	return q.commitChunks(ctx, actor, jobs)
}

// batchChunk is the most jobs one commit of a batch carries: a job is two
// writes (its lane entry and record), a commit at most storage.MaxCommit.
const batchChunk = storage.MaxCommit / 2

// commitChunks commits valid jobs batchChunk at a time, in order, each
// commit all or nothing, and stops at the first that fails: the jobs
// before it landed and are returned, the error a *lifecycle.BatchError
// whose Landed says how many (a failure of the first commit, nothing
// written, stays as it is when it names no job). Why parts: a commit is
// bounded (storage.MaxCommit) and a caller's batch need not be; a part of
// 500 is 1,000 writes shared by one durable write.
func (q *admission) commitChunks(ctx context.Context, actor lifecycle.Actor, jobs []NewJob) ([]lifecycle.Job, error) {
	out := make([]lifecycle.Job, 0, len(jobs))
	for start := 0; start < len(jobs); start += batchChunk {
		got, err := q.commitChunk(ctx, actor, jobs[start:min(start+batchChunk, len(jobs))], start)
		if be, ok := errors.AsType[*lifecycle.BatchError](err); ok {
			return out, &lifecycle.BatchError{Index: start + be.Index, Landed: start, Err: be.Err}
		}
		if err != nil && start > 0 {
			return out, &lifecycle.BatchError{Index: start, Landed: start, Err: err}
		}
		if err != nil {
			return out, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// commitChunk commits one part of a batch, the jobs from seq on: their
// unique jobs resolved again when another insert created a generation
// meanwhile.
func (q *admission) commitChunk(ctx context.Context, actor lifecycle.Actor, jobs []NewJob, seq int) ([]lifecycle.Job, error) {
	for range 4 {
		out, err := q.commitUnique(ctx, actor, jobs, seq)
		if be, ok := errors.AsType[*lifecycle.BatchError](err); ok && errors.Is(be.Err, lifecycle.ErrJobExists) && jobs[be.Index].Unique != nil {
			continue // another insert created that generation meanwhile: resolve again
		}
		return out, err
	}
	return nil, errors.New("jobqueue: a batch's unique jobs were refused as existing and then read missing, four times over")
}

// commitUnique is commitMany for a batch that may hold unique jobs: each
// gets the id its uniqueness resolves to (unique.go), and one whose
// uniqueness a job holds already, in the store or earlier in the batch,
// is answered by that job, marked Duplicate, and not written. seq is the
// jobs' place in their batch (commitMany).
func (q *admission) commitUnique(ctx context.Context, actor lifecycle.Actor, jobs []NewJob, seq int) ([]lifecycle.Job, error) {
	if !slices.ContainsFunc(jobs, func(n NewJob) bool { return n.Unique != nil }) {
		return q.commitMany(ctx, actor, jobs, seq)
	}
	var (
		now     = q.clock.Now().UTC()
		answers = make([]lifecycle.Job, len(jobs))
		dupOf   = make([]int, len(jobs)) // the batch's index the job is a duplicate of, +1
		created = map[string]int{}
		write   = make([]NewJob, 0, len(jobs))
		at      = make([]int, 0, len(jobs)) // write[k] is jobs[at[k]]
	)
	for i := range jobs {
		if jobs[i].Unique == nil {
			write, at = append(write, jobs[i]), append(at, i)
			continue
		}
		jobs[i].JobID = ""
		t, err := q.resolve(ctx, &jobs[i], now)
		switch {
		case err != nil:
			return nil, &lifecycle.BatchError{Index: i, Err: err}
		case t.holder != nil:
			answers[i], jobs[i].JobID = *t.holder, t.holder.JobID
			answers[i].Duplicate = true
		case created[t.id] > 0:
			dupOf[i], jobs[i].JobID = created[t.id], t.id
		default:
			created[t.id], jobs[i].JobID = i+1, t.id
			write, at = append(write, jobs[i]), append(at, i)
		}
	}
	var landed []lifecycle.Job
	var err error
	if len(write) > 0 {
		landed, err = q.commitMany(ctx, actor, write, seq)
	}
	if be, ok := errors.AsType[*lifecycle.BatchError](err); ok {
		return nil, &lifecycle.BatchError{Index: at[be.Index], Err: be.Err}
	}
	if err != nil {
		return nil, err
	}
	for k, j := range landed {
		answers[at[k]] = j
	}
	for i, d := range dupOf {
		if d > 0 {
			answers[i] = answers[d-1]
			answers[i].Duplicate = true
		}
	}
	return answers, nil
}

// oneByOne writes valid jobs as Enqueue does, in order, and stops at the
// first failure: the jobs before it landed, the later ones were not tried.
func (q *admission) oneByOne(ctx context.Context, actor lifecycle.Actor, jobs []NewJob) ([]lifecycle.Job, error) {
	out := make([]lifecycle.Job, 0, len(jobs))
	for i := range jobs {
		jctx, span := q.tracer.Start(ctx, tracing.SpanEnqueue, trace.SpanKindProducer)
		var j lifecycle.Job
		var err error
		if jobs[i].Unique != nil {
			j, err = q.enqueueUnique(jctx, actor, &jobs[i])
		} else {
			j, err = q.write(jctx, actor, jobs[i])
		}
		endEnqueue(span, &jobs[i], err)
		if err != nil {
			return out, &lifecycle.BatchError{Index: i, Landed: i, Err: err}
		}
		out = append(out, j)
	}
	return out, nil
}

// batch is a batch of valid jobs on its way to one commit.
type batch struct {
	jobs  []NewJob
	docs  []jobDoc
	keys  []string // the job records'
	lanes []string // the lane entries'
	spans []tracing.Span
}

// commitMany writes valid jobs, their lane entries and the locks of their
// agents that do not exist yet in one commit: all of them land at one
// instant or none does, so no job is ever seen without its lane entry (no
// write first, no undo, no re-lane of a slow write, as Enqueue needs).
// seq is the first job's place in its batch: a batch's later commits
// order their jobs after the earlier ones' (prepare).
func (q *admission) commitMany(ctx context.Context, actor lifecycle.Actor, jobs []NewJob, seq int) (_ []lifecycle.Job, err error) {
	b, err := q.prepare(ctx, actor, jobs, seq)
	defer func() {
		for i := range b.spans {
			endEnqueue(b.spans[i], &jobs[i], err)
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := q.commitBatch(ctx, b); err != nil {
		return nil, err
	}
	out := make([]lifecycle.Job, len(jobs))
	for i := range b.docs {
		q.lanes.laneAdded(jobs[i].AgentSlug, b.lanes[i])
		q.obs.observe(nil, &b.docs[i], b.docs[i].Trail)
		out[i] = b.docs[i].Job
	}
	return out, nil
}

// prepare builds the batch's records, each in its own conveyor.enqueue
// span. The jobs of one agent get times a nanosecond apart (their run
// times too), so its lane holds those of one priority and time in the
// batch's order, counting from seq, the jobs' place in their batch, so
// a batch of several commits stays in order on a clock that has not
// moved between them.
func (q *admission) prepare(ctx context.Context, actor lifecycle.Actor, jobs []NewJob, seq int) (*batch, error) {
	n := len(jobs)
	b := &batch{jobs: jobs, docs: make([]jobDoc, n), keys: make([]string, n), lanes: make([]string, n), spans: make([]tracing.Span, 0, n)}
	now := q.clock.Now().UTC()
	for i := range jobs {
		jctx, span := q.tracer.Start(ctx, tracing.SpanEnqueue, trace.SpanKindProducer)
		b.spans = append(b.spans, span)
		key, err := layout.JobKey(jobs[i].JobID)
		if err != nil {
			return b, &lifecycle.BatchError{Index: i, Err: err}
		}
		b.keys[i] = key
		if b.docs[i], b.lanes[i], err = newJobDoc(jctx, actor, jobs[i], now, time.Duration(seq+i), q.rolling); err != nil {
			return b, &lifecycle.BatchError{Index: i, Err: err}
		}
		// A no-op but on a store that settles, and none of those commits.
		if err := q.jobs.existsBeforeCreate(ctx, key, jobs[i].JobID); err != nil {
			return b, &lifecycle.BatchError{Index: i, Err: err}
		}
	}
	return b, nil
}

// commitBatch commits b's writes: the locks its agents lack, then each
// job's lane entry and record. A lock another process made meanwhile is
// dropped and the rest committed again; a job whose id exists fails the
// batch, naming it. Past storage.MaxCommit writes (many new agents) the
// locks are committed first, on their own: a lock without jobs is what
// Enqueue's first write leaves too.
func (q *admission) commitBatch(ctx context.Context, b *batch) (err error) {
	// One job's lane entry is this Queue's own write: its caller adds it
	// to its cache once it lands (laneAdded). A batch of many signals its
	// Workers as another writer's would: marked, batched inserts on SQLite
	// ran at half their rate or less (measured; the Workers waited for
	// the recheck, though laneAdded keeps or schedules every key: the
	// cause is not pinned down, so the signal stays until it is).
	if len(b.jobs) == 1 {
		ctx = q.lanes.mine(ctx)
		defer func() { q.lanes.wroteMine(err) }()
	}
	agents := make([]string, 0, 1)
	for i := range b.jobs {
		if !slices.Contains(agents, b.jobs[i].AgentSlug) {
			agents = append(agents, b.jobs[i].AgentSlug)
		}
	}
	locks, err := q.locks.lockWrites(ctx, agents)
	if err != nil {
		return err
	}
	jobWrites := make([]storage.Write, 0, 2*len(b.jobs))
	for i := range b.jobs {
		ready := b.docs[i].CreatedAt
		if at := b.docs[i].ScheduledAt; at != nil {
			ready = *at
		}
		lane, err := encodeLane(b.jobs[i].JobID, ready)
		if err != nil {
			return err
		}
		rec, err := records.CreateWrite(b.keys[i], &b.docs[i])
		if err != nil {
			return err
		}
		jobWrites = append(jobWrites, storage.Write{Key: b.lanes[i], Value: lane, Cond: storage.IfNotExists()}, rec)
	}
	if len(locks)+len(jobWrites) > storage.MaxCommit {
		if locks, err = q.commitLocks(ctx, locks, nil, b); err != nil {
			return err
		}
	}
	_, err = q.commitLocks(ctx, locks, jobWrites, b)
	return err
}

// commitLocks commits locks and jobs together (jobs may be none), again
// without each lock another process made meanwhile. It returns the locks
// not yet made: none once it succeeds.
func (q *admission) commitLocks(ctx context.Context, locks, jobs []storage.Write, b *batch) ([]storage.Write, error) {
	resolved := false
	for {
		writes := append(slices.Clip(locks), jobs...)
		_, err := q.store.Commit(ctx, writes)
		if len(jobs) == 0 && errors.Is(err, storage.ErrOutcomeUnknown) {
			// Locks alone, made or not: the jobs' commit finds out.
			return locks, nil
		}
		if errors.Is(err, storage.ErrOutcomeUnknown) && !resolved && len(jobs) > 0 {
			// All of it landed or none did: the first record says which.
			resolved = true
			landed, rerr := q.landed(ctx, jobs[1])
			if rerr != nil {
				return locks, err
			}
			if !landed {
				continue // nothing landed: the commit again says what stood in its way
			}
			err = nil
		}
		if err == nil {
			for _, w := range locks {
				q.locks.made(lockAgent(w.Key))
			}
			return nil, nil
		}
		oe, ok := errors.AsType[*storage.OpError](err)
		if !ok || !errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrOutcomeUnknown) {
			return locks, err
		}
		if i := slices.IndexFunc(locks, func(w storage.Write) bool { return w.Key == oe.Key }); i >= 0 {
			q.locks.made(lockAgent(oe.Key))
			// Someone else is making these agents' locks: keep only
			// those still missing, or each retry would drop one lock.
			if locks, err = q.locks.stillMissing(ctx, slices.Delete(slices.Clone(locks), i, i+1)); err != nil {
				return locks, err
			}
			if len(locks)+len(jobs) == 0 {
				return nil, nil
			}
			continue
		}
		for i := range b.jobs {
			if oe.Key == b.keys[i] || oe.Key == b.lanes[i] {
				return locks, &lifecycle.BatchError{Index: i, Err: fmt.Errorf("%w: %s", lifecycle.ErrJobExists, b.jobs[i].JobID)}
			}
		}
		return locks, err
	}
}

// landed tells whether rec, a job record's create in a commit whose
// outcome is unknown, landed: the record reads as written.
func (q *admission) landed(ctx context.Context, rec storage.Write) (bool, error) {
	got, _, err := q.store.Get(ctx, rec.Key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return string(got) == string(rec.Value), nil
}

// lockAgent is the agent of a lock's key.
func lockAgent(key string) string {
	agent, _ := layout.AgentFromLockKey(key)
	return agent
}
