package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// lanedJob is a job in a lane as a count read it: where it counts and the
// rest it left (its trail's first from), or nothing (at rest: its audit
// object counts it). Kept by lane key: while the entry is listed, no lock
// names the job and no rest of it is seen, the job has not moved (every
// move out of a lane is made under the lane's lock, and every rest
// writes an audit object), so the next count needs no read of it.
type lanedJob struct {
	name   jobName
	status lifecycle.JobState
	from   lifecycle.JobState
	atRest bool
	readAt time.Time
}

// restSkew is how far another process's clock may run behind this one's
// in the stamps of the audit objects that tell a laned job moved.
const restSkew = time.Minute

// apply moves the job in net from the rest it left to where it is.
func (l *lanedJob) apply(net map[netKey]int64) {
	if l.atRest {
		return
	}
	net[netKey{l.name, l.status}]++
	if l.from != "" {
		net[netKey{l.name, l.from}]--
	}
}

// inFlight moves the jobs in flight in net: every job in flight is in its
// lane or named by its agent's lock (docs/design.md#jobs), so the lanes'
// entries and the locks name them all, and only they are read. A job at
// rest (its audit object in the log) is counted there already; any other
// counts where it is, and no longer where its trail says it last rested.
// A job a lock names is read at every count; one only in a lane is read
// once and then known by its entry (lanedJob) until it rests, a lock
// names it, or the open hours move past the read, so a count costs the
// lanes' and locks' listings and the locks, not a read per queued job.
// since is the open hours' start, rested the latest rest of each job in
// them (trusted when restedOK: the audit log was read whole). ok false: b
// ran out first.
func (t *tally) inFlight(ctx context.Context, net map[netKey]int64, b *budget, since time.Time, rested map[string]time.Time, restedOK bool) (bool, error) {
	lanes := map[string]string{} // job id → a lane key of it
	for key, err := range t.store.List(ctx, layout.LanesPrefix) {
		if err != nil {
			return false, err
		}
		if _, _, id, ok := layout.ParseLaneKey(key); ok {
			lanes[id] = key
		}
	}
	locked, ok, err := t.lockedJobs(ctx, b)
	if err != nil || !ok {
		return false, err
	}
	ids := maps.Clone(locked)
	for id := range lanes {
		ids[id] = true
	}
	t.mu.Lock()
	known := t.laned
	t.mu.Unlock()
	keep := make(map[string]lanedJob, len(lanes))
	now := t.clock.Now()
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		key, inLane := lanes[id]
		inLane = inLane && !locked[id]
		if l, ok := known[key]; inLane && restedOK && ok && !l.readAt.Before(since) && rested[id].Before(l.readAt.Add(-restSkew)) {
			keep[key] = l
			l.apply(net)
			continue
		}
		if !b.take() {
			return false, nil
		}
		d, _, err := t.jobs.read(ctx, id)
		if errors.Is(err, storage.ErrNotFound) || errors.Is(err, errNewerRecord) {
			continue // a lane entry ahead of its job, a job gone or not this release's
		}
		if err != nil {
			return false, err
		}
		l := lanedJob{atRest: flushes(d.Status), readAt: now, status: d.Status, name: nameOf(&d.Job)}
		if !l.atRest {
			t.remember(id, l.name)
			if len(d.Trail) > 0 {
				l.from = d.Trail[0].From
			}
		}
		l.apply(net)
		if inLane && len(keep) < tallySeen {
			keep[key] = l
		}
	}
	t.mu.Lock()
	t.laned = keep // the entries no longer listed are forgotten
	t.mu.Unlock()
	return true, nil
}

// lockedJobs reads the lanes' locks and returns the jobs they name: a
// lock of a lane names the job it runs or last ran, slot 0's and the
// others'. ok false: b ran out first.
func (t *tally) lockedJobs(ctx context.Context, b *budget) (map[string]bool, bool, error) {
	ids := map[string]bool{}
	for key, err := range t.store.List(ctx, layout.AgentLocksPrefix) {
		if err != nil {
			return nil, false, err
		}
		if _, _, ok := layout.ParseSlotLockKey(key); !ok {
			continue
		}
		if !b.take() {
			return nil, false, nil
		}
		raw, _, err := t.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		var l agentLock
		if json.Unmarshal(raw, &l) == nil && l.JobID != "" {
			ids[l.JobID] = true
		}
	}
	return ids, true, nil
}
