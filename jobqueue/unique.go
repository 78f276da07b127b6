package jobqueue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/evidence"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Unique jobs (NewJob.Unique, docs/design.md#jobs). A unique job's id is
// derived from its uniqueness: a hash of its type, its key (or its payload
// as canonical JSON) and its period, then a generation, "u-{hash}" for the
// first and "u-{hash}.{n}" after it. The generation moves on only past a
// job outside the unique states (by default DEAD or CANCELLED). So the
// uniqueness rests on the job record's own create-only write, as a
// periodic job's slot does (its id is the slot's key): two inserts of one
// uniqueness create one record, the other is refused and answers the
// job, and no other object is written. An insert reads the generations in
// turn (a hint per Queue skips those already seen left), and creates the
// first it reads missing:
//
//   - a found read is never wrong: the job found, in a unique state, is
//     the answer (a duplicate), else the next generation is read;
//   - on a store that settles, a generation read missing is believed only
//     once read missing again at least the settle time later
//     (evidence.Absence, begun by the insert's own read): the insert
//     waits for that, within its context, rather than create over a job
//     one false not-found hid (a create-only write may land over one in
//     the same disturbance). A store that settles at once waits for
//     nothing.

// uniquePrefix starts the id of a unique job.
const uniquePrefix = "u-"

// maxGenerations bounds the generations of one uniqueness an insert reads
// (a job of one uniqueness buried or cancelled that often in one period).
const maxGenerations = 1000

// uniqueHash is n's uniqueness, a hash of its type, its key or canonical
// payload and, with a period, the start of the period its run time falls
// in; readyAt is that run time.
//
// Another tenant than the default one is hashed too, so two tenants'
// uniqueness never meet (the default tenant's hashes as before tenants).
func uniqueHash(tenant string, n *NewJob, readyAt time.Time) string {
	u := n.Unique
	h := sha256.New()
	fmt.Fprintf(h, "conveyor-unique-1\x00%s\x00", n.JobType)
	if tenant != "" {
		fmt.Fprintf(h, "tenant\x00%s\x00", tenant)
	}
	if u.Key != "" {
		fmt.Fprintf(h, "key\x00%s\x00", u.Key)
	} else {
		h.Write([]byte("args\x00"))
		h.Write(canonicalJSON(n.Payload))
		h.Write([]byte{0})
	}
	if u.Period > 0 {
		fmt.Fprintf(h, "period\x00%d\x00%d", u.Period, readyAt.UTC().Truncate(u.Period).UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// canonicalJSON is b in one form per value: members sorted by name, no
// spaces, numbers as written (1 and 1.0 differ: a number is not rounded
// through a float, so two large ids never collide). Empty stays empty.
func canonicalJSON(b json.RawMessage) []byte {
	if len(b) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b // validated before; kept as it is all the same
	}
	out, err := json.Marshal(v) // map members sorted by name
	if err != nil {
		return b
	}
	return out
}

// uniqueID is the id of generation gen of uniqueness hash.
func uniqueID(hash string, gen int) string {
	if gen == 0 {
		return uniquePrefix + hash
	}
	return uniquePrefix + hash + "." + strconv.Itoa(gen)
}

// checkUnique checks n's Unique (set): no id of its own, a key of one
// line, a period and states that exist.
func (n *NewJob) checkUnique() error {
	u := n.Unique
	if n.JobID != "" {
		return badJob("job_id %q: a unique job's id is derived from its uniqueness (give unique.key for one of your own)", n.JobID)
	}
	if err := codes.CheckText("unique.key", u.Key, codes.MaxRefBytes, codes.OneLine); err != nil {
		return fmt.Errorf("%w: %w", lifecycle.ErrInvalidJob, err)
	}
	if u.Period < 0 || u.Period > maxDelay {
		return badJob("unique.period %s outside 0 to 100 years", u.Period)
	}
	if len(u.States) > 16 {
		return badJob("unique.states: %d states, at most 16", len(u.States))
	}
	for _, s := range u.States {
		if !machine.AnyJobState(s) {
			return badJob("unique.states: %q is not a job state", s)
		}
	}
	return nil
}

// uniqueStates are the states that hold u's uniqueness: by default
// every state but DEAD and CANCELLED (River's default too: all but its
// cancelled and discarded).
func uniqueStates(u *lifecycle.Unique) []lifecycle.JobState {
	if len(u.States) == 0 {
		return defaultUniqueStates
	}
	return u.States
}

var defaultUniqueStates = []lifecycle.JobState{lifecycle.JobPending, lifecycle.JobQueued, lifecycle.JobContextAssembly,
	lifecycle.JobNotebookLMCall, lifecycle.JobArtifactWrite, lifecycle.JobRunning, lifecycle.JobRetryBackoff,
	lifecycle.JobFailed, lifecycle.JobComplete}

// uniqueHints remembers, per uniqueness, the generation this Queue last
// found or created, so an insert reads the generations left behind once.
// Generations only grow; a hint lost (the map is cleared when full) costs
// reads, never a wrong answer.
type uniqueHints struct {
	mu  sync.Mutex
	gen map[string]int
}

func (h *uniqueHints) get(hash string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen[hash]
}

func (h *uniqueHints) set(hash string, gen int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen == nil || len(h.gen) >= 4096 {
		h.gen = map[string]int{}
	}
	h.gen[hash] = max(gen, h.gen[hash])
}

// uniqueTarget is what an insert of a unique job found: the id to create
// (gen its generation), or the job holding its uniqueness.
type uniqueTarget struct {
	hash   string
	id     string
	gen    int
	holder *lifecycle.Job
}

// resolve finds where n (valid, unique) goes: the first generation of its
// uniqueness read missing (its absence settled, on a store that settles),
// or the job of a generation found in one of the unique states.
func (q *admission) resolve(ctx context.Context, n *NewJob, now time.Time) (uniqueTarget, error) {
	t := uniqueTarget{hash: uniqueHash(tenancy.Creating(ctx), n, n.readyAt(now))}
	states := uniqueStates(n.Unique)
	for gen := q.hints.get(t.hash); gen < maxGenerations; gen++ {
		id := uniqueID(t.hash, gen)
		d, _, err := q.jobs.read(ctx, id)
		switch {
		case err == nil:
			q.hints.set(t.hash, gen)
			if slices.Contains(states, d.Status) {
				t.holder = &d.Job
				return t, nil
			}
			continue // outside the unique states: the next generation
		case !errors.Is(err, storage.ErrNotFound):
			return t, err
		}
		found, err := q.settleAbsence(ctx, id)
		if err != nil {
			return t, err
		}
		if found {
			gen-- // read again, and judged
			continue
		}
		t.id, t.gen = id, gen
		return t, nil
	}
	return t, badJob("unique job: %d generations of its uniqueness buried or cancelled in one period", maxGenerations)
}

// settleAbsence waits, on a store that settles, until job id, just read
// missing, is believed missing: read missing again at least the settle
// time later with no read finding it between (evidence.Absence), reading
// it every quarter of the settle time; found tells it was found
// meanwhile. The evidence is this call's own, begun by its own first
// read: the queue's shared one may date from before another insert
// created the job, and a create on it could land over that job. A store
// that settles at once returns at once.
func (q *admission) settleAbsence(ctx context.Context, id string) (found bool, err error) {
	settle := q.jobs.absent.Settle
	if settle <= 0 {
		return false, nil
	}
	fresh := evidence.Absence{Settle: settle}
	for !fresh.Confirmed(id, q.clock.Now()) {
		if err := activity.Sleep(ctx, q.clock, settle/4); err != nil {
			return false, fmt.Errorf("jobqueue: unique job %s read missing, not yet for the settle time (%s): %w", id, settle, err)
		}
		_, _, err := q.jobs.read(ctx, id)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, storage.ErrNotFound):
			return false, err
		}
	}
	return false, nil
}

// enqueueUnique is Enqueue of a unique job (n valid): the job holding its
// uniqueness, marked Duplicate, or the job created at the generation
// resolve found. A create refused because another insert created that
// generation meanwhile resolves again and answers that one.
func (q *admission) enqueueUnique(ctx context.Context, actor lifecycle.Actor, n *NewJob) (lifecycle.Job, error) {
	for range 4 {
		n.JobID = ""
		t, err := q.resolve(ctx, n, q.clock.Now().UTC())
		if err != nil {
			return lifecycle.Job{}, err
		}
		if t.holder != nil {
			n.JobID = t.holder.JobID
			j := *t.holder
			j.Duplicate = true
			return j, nil
		}
		n.JobID = t.id
		j, err := q.write(ctx, actor, *n)
		if errors.Is(err, lifecycle.ErrJobExists) {
			continue
		}
		if err == nil {
			q.hints.set(t.hash, t.gen)
		}
		return j, err
	}
	return lifecycle.Job{}, errors.New("jobqueue: unique job: its generation was refused as existing and then read missing, four times over")
}
