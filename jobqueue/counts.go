package jobqueue

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// counts is Operator.Counts: the net counts of the audit log (the latest
// closed day's rollup, the closed hours' after it, the objects since)
// give where every job last came to rest; the jobs in flight (lanes and
// locks) that left their rest are moved from it to where they are.
func (t *tally) counts(ctx context.Context, actor lifecycle.Actor) (lifecycle.JobCounts, error) {
	if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{}); err != nil {
		return lifecycle.JobCounts{}, err
	}
	now := t.clock.Now().UTC()
	b := &budget{left: tallyReads}
	a := newAcc()
	partial := false
	day := closedDay(now)
	base, ok, err := t.day(ctx, day, b)
	if err != nil {
		return lifecycle.JobCounts{}, err
	}
	partial = partial || !ok
	a.addNet(base)
	liveFrom := closedHour(now).Add(time.Hour)
	for h := day.Add(24 * time.Hour); h.Before(liveFrom); h = h.Add(time.Hour) {
		ok, err := t.hour(ctx, h, a, b)
		if err != nil {
			return lifecycle.JobCounts{}, err
		}
		partial = partial || !ok
	}
	ok, err = t.live(ctx, liveFrom, now, b, func(s segment) error {
		n, named, err := t.name(ctx, s.job, b)
		if err != nil || !named {
			return errOr(err, errBudget)
		}
		a.add(s, n)
		return nil
	})
	if err != nil && !errors.Is(err, errBudget) {
		return lifecycle.JobCounts{}, err
	}
	partial = partial || !ok || err != nil
	t.forget(liveFrom)
	if ok, err := t.inFlight(ctx, a.net, b); err != nil {
		return lifecycle.JobCounts{}, err
	} else if !ok {
		partial = true
	}
	out := countsOf(a.net)
	out.AsOf, out.Partial = now, partial
	return out, nil
}

func errOr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// inFlight moves the jobs in flight in net: every job in flight is in its
// lane or named by its agent's lock (docs/design.md#jobs), so the lanes'
// entries and the locks name them all, and only they are read. A job at
// rest (its audit object in the log) is counted there already; any other
// counts where it is, and no longer where its trail says it last rested.
// ok false: b ran out first.
func (t *tally) inFlight(ctx context.Context, net map[netKey]int64, b *budget) (bool, error) {
	ids := map[string]bool{}
	for key, err := range t.store.List(ctx, layout.LanesPrefix) {
		if err != nil {
			return false, err
		}
		if _, _, id, ok := layout.ParseLaneKey(key); ok {
			ids[id] = true
		}
	}
	for key, err := range t.store.List(ctx, layout.AgentLocksPrefix) {
		if err != nil {
			return false, err
		}
		if _, _, ok := layout.ParseSlotLockKey(key); !ok {
			continue // every lock of a lane names a job it runs: slot 0's and the others'
		}
		if !b.take() {
			return false, nil
		}
		raw, _, err := t.store.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		var l agentLock
		if json.Unmarshal(raw, &l) == nil && l.JobID != "" {
			ids[l.JobID] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
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
		if flushes(d.Status) {
			continue
		}
		n := nameOf(&d.Job)
		t.remember(id, n)
		net[netKey{n, d.Status}]++
		if len(d.Trail) > 0 && d.Trail[0].From != "" {
			net[netKey{n, d.Trail[0].From}]--
		}
	}
	return true, nil
}

// countsOf is net as the API answers it: a row per job name, states with
// a count; a count below zero (a job whose earlier moves the log no longer
// has: retention deleted their day) is left out.
func countsOf(net map[netKey]int64) lifecycle.JobCounts {
	out := lifecycle.JobCounts{Rows: []lifecycle.JobCountRow{}, Total: map[lifecycle.JobState]int64{}}
	rows := map[jobName]map[lifecycle.JobState]int64{}
	for k, n := range net {
		if n <= 0 {
			continue
		}
		if rows[k.jobName] == nil {
			rows[k.jobName] = map[lifecycle.JobState]int64{}
		}
		rows[k.jobName][k.state] += n
		out.Total[k.state] += n
	}
	for name, c := range rows {
		out.Rows = append(out.Rows, lifecycle.JobCountRow{JobType: name.JobType, AgentSlug: name.AgentSlug, Machine: name.Machine, Counts: c})
	}
	slices.SortFunc(out.Rows, func(x, y lifecycle.JobCountRow) int {
		if c := strings.Compare(string(x.JobType), string(y.JobType)); c != 0 {
			return c
		}
		return strings.Compare(x.AgentSlug, y.AgentSlug)
	})
	return out
}

// activityMinutes is how many minutes Activity answers: the last hour.
const activityMinutes = 60

// activity is Operator.Activity: the closed hours' rollups that overlap the
// last hour and the objects since.
func (t *tally) activity(ctx context.Context, actor lifecycle.Actor) (lifecycle.JobActivity, error) {
	if err := authority.Check(actor, authority.Jobs, authority.Read, authority.Scope{}); err != nil {
		return lifecycle.JobActivity{}, err
	}
	now := t.clock.Now().UTC()
	last := now.Truncate(time.Minute)
	first := last.Add(-(activityMinutes - 1) * time.Minute)
	b := &budget{left: tallyReads}
	a := newAcc()
	partial := false
	liveFrom := closedHour(now).Add(time.Hour)
	for h := first.Truncate(time.Hour); h.Before(liveFrom); h = h.Add(time.Hour) {
		ok, err := t.hour(ctx, h, a, b)
		if err != nil {
			return lifecycle.JobActivity{}, err
		}
		partial = partial || !ok
	}
	t.forget(liveFrom) // as counts does: what is seen is held for the open hours only
	ok, err := t.live(ctx, liveFrom, now, b, func(s segment) error {
		a.add(s, jobName{}) // the minutes need no name
		return nil
	})
	if err != nil {
		return lifecycle.JobActivity{}, err
	}
	out := lifecycle.JobActivity{Minutes: make([]lifecycle.JobActivityMinute, 0, activityMinutes), Partial: partial || !ok}
	for at := first; !at.After(last); at = at.Add(time.Minute) {
		m := lifecycle.JobActivityMinute{At: at}
		if r := a.minutes[at]; r != nil {
			m.Completed, m.Failed, m.Cancelled = r.Completed, r.Failed, r.Cancelled
			m.RunP50MS, m.RunP95MS = percentile(r.Run, r.MaxRunMS, 0.50), percentile(r.Run, r.MaxRunMS, 0.95)
			m.WaitP95MS = percentile(r.Wait, r.MaxWaitMS, 0.95)
		}
		out.Minutes = append(out.Minutes, m)
	}
	return out, nil
}

// percentile is the p-th of histogram h (latencyBounds): the upper bound
// of its bucket, at most the longest seen; nil for an empty one.
func percentile(h []int, longest int64, p float64) *int64 {
	total := 0
	for _, n := range h {
		total += n
	}
	if total == 0 {
		return nil
	}
	rank := int(math.Ceil(p * float64(total)))
	cum := 0
	for i, n := range h {
		if cum += n; cum >= rank {
			v := longest
			if i < len(latencyBounds) {
				v = min(latencyBounds[i], longest)
			}
			return &v
		}
	}
	return &longest
}
