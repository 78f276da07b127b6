package jobqueue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// The bounds of one History's reading of the audit log, which has no index
// by job: the keys it lists (keys only; it reads the job's own objects,
// found by the digest of its id that their ids carry), and the days
// before the job's last write it looks back. Past either the history is
// Partial.
const (
	historyKeys = 20000
	historyDays = 31
)

// historySkew widens the window of the listing on both sides: a move's
// time is its writer's clock, which may differ a little from the clock
// that stamped the job's created_at and updated_at.
const historySkew = time.Minute

// history is Operator.History.
func (q *reader) history(ctx context.Context, actor lifecycle.Actor, jobID string) (lifecycle.JobHistory, error) {
	job, err := q.get(ctx, actor, jobID)
	if err != nil {
		return lifecycle.JobHistory{}, err
	}
	moves, partial, err := q.auditMoves(ctx, &job)
	if err != nil {
		return lifecycle.JobHistory{}, err
	}
	moves = withTrail(moves, job.Trail)
	return lifecycle.JobHistory{Job: job, Moves: moves, Attempts: attempts(moves), Partial: partial}, nil
}

// auditMoves lists the audit log from the job's creation to its last
// write and reads the objects of the job's own writes (their ids carry
// the digest of its id, records.AuditEventID): the listing costs the
// events of that window, the reads the job's.
func (q *reader) auditMoves(ctx context.Context, j *lifecycle.Job) (moves []lifecycle.JobMove, partial bool, err error) {
	sum := sha256.Sum256([]byte(j.JobID))
	mark := "-" + hex.EncodeToString(sum[:8]) + "-"
	from, to := j.CreatedAt.Add(-historySkew).UTC(), j.UpdatedAt.Add(historySkew).UTC()
	if earliest := to.Add(-historyDays * 24 * time.Hour); from.Before(earliest) {
		from, partial = earliest, true
	}
	end := layout.AuditIDStamp(to)
	after := layout.AuditAfter(from) // sorts before every key of the later days
	listed := 0
	for day := from.Truncate(24 * time.Hour); !day.After(to); day = day.Add(24 * time.Hour) {
		for key, err := range q.store.ListAfter(ctx, layout.AuditDayPrefix(day), after) {
			if err != nil {
				return nil, false, err
			}
			if listed++; listed > historyKeys {
				return moves, true, nil
			}
			id, ok := layout.ParseAuditKey(key)
			if !ok {
				continue
			}
			if len(id) >= len(end) && id[:len(end)] > end {
				break // past the job's last write: the rest of the day is others'
			}
			if !strings.Contains(id, mark) {
				continue
			}
			evs, err := readAuditObject(ctx, q.store, key, id)
			if err != nil {
				return nil, false, err
			}
			for _, ev := range evs {
				if m, ok := moveOf(&ev, j.JobID); ok {
					moves = append(moves, m)
				}
			}
		}
	}
	return moves, partial, nil
}

// readAuditObject reads the audit object at key with the events it
// batches; none when it is gone (retention).
func readAuditObject(ctx context.Context, s *storage.Store, key, id string) ([]lifecycle.AuditEvent, error) {
	raw, _, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ev lifecycle.AuditEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		return nil, nil // not the queue's object: another subject's digest collided
	}
	return records.Expand(ev, id), nil
}

// moveOf is the job move an audit event of job jobID records, with the
// machine's event name (the audit event has only the states) and the
// error of a failed attempt (moveErrorContext).
func moveOf(ev *lifecycle.AuditEvent, jobID string) (lifecycle.JobMove, bool) {
	if ev.JobID != jobID || ev.Event != "job.create" && ev.Event != "job.status.update" {
		return lifecycle.JobMove{}, false
	}
	m := lifecycle.JobMove{From: lifecycle.JobState(ev.From), To: lifecycle.JobState(ev.To), Actor: lifecycle.Actor(ev.Actor), At: ev.TS}
	if ev.From == "" {
		m.Event = "create"
	} else if t, ok := machine.JobMachine().Edge(m.From, m.To); ok {
		m.Event = t.Event
	} else if t, ok := machine.GeneralJobMachine().Edge(m.From, m.To); ok {
		m.Event = t.Event // a move of the general machine alone (RUNNING, CANCELLED)
	}
	if len(ev.Context) > 0 {
		var tc lifecycle.TransitionContext
		if json.Unmarshal(ev.Context, &tc) == nil {
			m.ErrorCode, m.Error = tc.Metadata[metaErrorCode], tc.Metadata[metaError]
		}
	}
	return m, true
}

// withTrail adds the record's trail to the moves from the audit log: at
// rest the trail is the moves already flushed, else the moves since the
// last rest, not flushed yet. A move in both is kept once.
func withTrail(moves, trail []lifecycle.JobMove) []lifecycle.JobMove {
	type at struct {
		from, to lifecycle.JobState
		t        int64
	}
	seen := map[at]bool{}
	for _, m := range moves {
		seen[at{m.From, m.To, m.At.UnixNano()}] = true
	}
	for _, m := range trail {
		if !seen[at{m.From, m.To, m.At.UnixNano()}] {
			moves = append(moves, m)
		}
	}
	slices.SortStableFunc(moves, func(a, b lifecycle.JobMove) int { return a.At.Compare(b.At) })
	return moves
}

// idle tells the states a job waits in, or ends in: any other state is a
// worker's (an attempt).
func idle(s lifecycle.JobState) bool {
	switch s {
	case "", lifecycle.JobPending, lifecycle.JobQueued, lifecycle.JobRetryBackoff,
		lifecycle.JobFailed, lifecycle.JobDead, lifecycle.JobComplete, lifecycle.JobCancelled:
		return true
	}
	return machine.JobMachine().IsTerminal(s)
}

// attempts makes the job's attempts from its moves: one starts at a move
// from a waiting state to a worker's, and ends at the move back to a
// waiting or final state. Attempts count from 1 again after a requeue,
// and a snoozed run (outcome QUEUED) gives its number back, as the
// record's attempt does.
func attempts(moves []lifecycle.JobMove) []lifecycle.JobAttempt {
	out := []lifecycle.JobAttempt{}
	n := 0
	for _, m := range moves {
		if m.Event == machine.EventRequeue {
			n = 0
		}
		switch {
		case idle(m.From) && !idle(m.To):
			n++
			out = append(out, lifecycle.JobAttempt{Attempt: n, StartedAt: m.At})
		case m.To == lifecycle.JobFailed && len(out) > 0 && out[len(out)-1].EndedAt != nil && m.At.Equal(*out[len(out)-1].EndedAt):
			// A failure's move of the same write (a permanent failure, or
			// the last attempt's, goes on to FAILED at once): the attempt
			// ended there.
			out[len(out)-1].Outcome = m.To
		case !idle(m.From) && idle(m.To) && len(out) > 0 && out[len(out)-1].EndedAt == nil:
			a := &out[len(out)-1]
			end := m.At
			ms := end.Sub(a.StartedAt).Milliseconds()
			a.EndedAt, a.DurationMS, a.Outcome, a.ErrorCode, a.Error = &end, &ms, m.To, m.ErrorCode, m.Error
			if m.Event == machine.EventSnooze {
				n-- // a snooze gives its attempt back: the next run has its number
			}
		}
	}
	return out
}
