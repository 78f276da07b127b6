// Package jobaudit replays the job events of the audit log through the job
// machine: the proofs and the chaos example check with it that every job
// moved by legal transitions only, made by their actors.
package jobaudit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

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

// Replay reads the job events of the audit log for the UTC days from
// first to last (inclusive) and replays each job's transitions through the
// job machine: the first must create the job in PENDING, each next one must
// start where the last ended, be a move of the table and be made by one of
// its actors. The events do not name the job's machine: a job that went
// to RUNNING or CANCELLED ran on the general machine, whose moves it is
// held to, and to the spec's for an attempt an earlier release (which
// knew only that one) picked up; any other job to the spec's. It returns
// each job's final state, or a *ReplayError.
func Replay(ctx context.Context, s *storage.Store, first, last time.Time) (map[string]lifecycle.JobState, error) {
	byJob := map[string][]lifecycle.AuditEvent{}
	for day := first.UTC().Truncate(24 * time.Hour); !day.After(last.UTC()); day = day.Add(24 * time.Hour) {
		for e, err := range records.ReadAuditDay(ctx, s, day) {
			if err != nil {
				return nil, err
			}
			if e.JobID == "" || !strings.HasPrefix(e.Event, "job.") {
				continue
			}
			byJob[e.JobID] = append(byJob[e.JobID], e)
		}
	}
	out := make(map[string]lifecycle.JobState, len(byJob))
	for id, evs := range byJob {
		slices.SortFunc(evs, func(a, b lifecycle.AuditEvent) int { return strings.Compare(a.ID, b.ID) })
		ms := machinesOf(evs)
		var state lifecycle.JobState
		for i, e := range evs {
			from, to := lifecycle.JobState(e.From), lifecycle.JobState(e.To)
			if i == 0 {
				if from != "" || to != lifecycle.JobPending {
					return nil, &ReplayError{id, e.ID, fmt.Sprintf("first event %q → %q does not create the job in PENDING", from, to)}
				}
				state = to
				continue
			}
			if from != state {
				return nil, &ReplayError{id, e.ID, fmt.Sprintf("event starts in %q but the job was in %q", from, state)}
			}
			t, ok := edge(ms, from, to)
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

type jobMachine = *machine.Machine[lifecycle.JobState, *lifecycle.Job]

// machinesOf lists the machines a job's events are held to: the general
// one, then the spec's, for a job that went to RUNNING or CANCELLED; the
// spec's alone for any other.
func machinesOf(evs []lifecycle.AuditEvent) []jobMachine {
	for _, e := range evs {
		if to := lifecycle.JobState(e.To); to == lifecycle.JobRunning || to == lifecycle.JobCancelled {
			return []jobMachine{machine.GeneralJobMachine(), machine.JobMachine()}
		}
	}
	return []jobMachine{machine.JobMachine()}
}

// edge is the first of ms's from → to transitions.
func edge(ms []jobMachine, from, to lifecycle.JobState) (machine.Transition[lifecycle.JobState, *lifecycle.Job], bool) {
	for _, m := range ms {
		if t, ok := m.Edge(from, to); ok {
			return t, true
		}
	}
	return machine.Transition[lifecycle.JobState, *lifecycle.Job]{}, false
}
