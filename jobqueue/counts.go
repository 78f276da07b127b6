package jobqueue

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/authority"
	"github.com/runconveyor/conveyor/internal/tenancy"
	"github.com/runconveyor/conveyor/lifecycle"
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
	rested := map[string]time.Time{} // job id → its latest rest in the open hours
	ok, err = t.live(ctx, liveFrom, now, b, func(s segment) error {
		if s.at.After(rested[s.job]) {
			rested[s.job] = s.at
		}
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
	if ok, err := t.inFlight(ctx, a.net, b, liveFrom, rested, ok && err == nil); err != nil {
		return lifecycle.JobCounts{}, err
	} else if !ok {
		partial = true
	}
	out := countsOf(ctx, a.net)
	out.AsOf, out.Partial = now, partial
	return out, nil
}

func errOr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// countsOf is net as the API answers it to a caller under ctx: a row per
// job name of a tenant it sees (docs/design.md#tenants), states with a
// count; a count below zero (a job whose earlier moves the log no longer
// has: retention deleted their day) is left out.
func countsOf(ctx context.Context, net map[netKey]int64) lifecycle.JobCounts {
	out := lifecycle.JobCounts{Rows: []lifecycle.JobCountRow{}, Total: map[lifecycle.JobState]int64{}}
	rows := map[jobName]map[lifecycle.JobState]int64{}
	for k, n := range net {
		if n <= 0 || !tenancy.Sees(ctx, k.Tenant) {
			continue
		}
		if rows[k.jobName] == nil {
			rows[k.jobName] = map[lifecycle.JobState]int64{}
		}
		rows[k.jobName][k.state] += n
		out.Total[k.state] += n
	}
	for name, c := range rows {
		out.Rows = append(out.Rows, lifecycle.JobCountRow{TenantID: name.Tenant, JobType: name.JobType, AgentSlug: name.AgentSlug, Machine: name.Machine, Counts: c})
	}
	slices.SortFunc(out.Rows, func(x, y lifecycle.JobCountRow) int {
		if c := strings.Compare(x.TenantID, y.TenantID); c != 0 {
			return c
		}
		if c := strings.Compare(string(x.JobType), string(y.JobType)); c != 0 {
			return c
		}
		if c := strings.Compare(x.AgentSlug, y.AgentSlug); c != 0 {
			return c
		}
		return strings.Compare(x.Machine, y.Machine)
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
	seen := seenMinutes(ctx, a.minutes)
	for at := first; !at.After(last); at = at.Add(time.Minute) {
		m := lifecycle.JobActivityMinute{At: at}
		if r := seen[at]; r != nil {
			m.Completed, m.Failed, m.Cancelled = r.Completed, r.Failed, r.Cancelled
			m.RunP50MS, m.RunP95MS = percentile(r.Run, r.MaxRunMS, 0.50), percentile(r.Run, r.MaxRunMS, 0.95)
			m.WaitP95MS = percentile(r.Wait, r.MaxWaitMS, 0.95)
		}
		out.Minutes = append(out.Minutes, m)
	}
	return out, nil
}

// seenMinutes adds up, minute by minute, the rows of the tenants a caller
// under ctx sees (docs/design.md#tenants).
func seenMinutes(ctx context.Context, minutes map[minuteKey]*minuteRow) map[time.Time]*minuteRow {
	out := map[time.Time]*minuteRow{}
	for k, r := range minutes {
		if !tenancy.Sees(ctx, k.tenant) {
			continue
		}
		into := out[k.at]
		if into == nil {
			into = &minuteRow{M: r.M}
			out[k.at] = into
		}
		into.addUp(r)
	}
	return out
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
