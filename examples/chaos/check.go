package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/artifact"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/testkit/jobaudit"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// The checks a run must pass.
const (
	CheckTerminal   = "terminal"   // every job COMPLETE, DEAD or quarantined
	CheckArtifact   = "artifact"   // one artifact per COMPLETE job, none for a live one, none pointed at by a DEAD one, agreeing with the job
	CheckLateWrite  = "late-write" // no artifact created after its attempt lost the job
	CheckAudit      = "audit"      // the audit log replays to every record's state; every run status write has its event
	CheckQuarantine = "quarantine" // only corrupted records quarantined; no poison left in place
	CheckShutdown   = "shutdown"   // a worker stops within the grace period of SIGTERM
	CheckSweep      = "sweep"      // the final sweep succeeds
	CheckEnqueue    = "enqueue"    // every job could be enqueued (outages waited out)
)

// Violation is one broken promise.
type Violation struct {
	Check   string
	Subject string // a job id, a key, a worker
	Detail  string
}

func (v Violation) String() string { return fmt.Sprintf("[%s] %s: %s", v.Check, v.Subject, v.Detail) }

// Planned is a job the parent enqueues.
type Planned struct {
	JobID, RunID, AgentSlug string
}

// Record is a job record as found in the store.
type Record struct {
	Present bool
	Raw     []byte
	Job     *lifecycle.Job // nil when absent or invalid
	Invalid string         // why a present record is not a valid job
	// LaneMissing: the job waits (QUEUED, RETRY_BACKOFF) for a ready-lane
	// entry (its ready_key) that is not in the store.
	LaneMissing bool
}

// State is what the checker judges: the store after a run, plus what the
// chaos loop did to it.
type State struct {
	Plan       []Planned
	Records    map[string]Record // by job id
	Quarantine []records.Quarantined
	Artifacts  []artifact.Artifact
	// Events are each job's audit events (job.* and artifact.*), in id
	// (time) order.
	Events map[string][]lifecycle.AuditEvent
	// Replayed is each job's final state by the replay of its audit events
	// through the job machine; ReplayErr the replay's refusal.
	Replayed  map[string]lifecycle.JobState
	ReplayErr error
	// ReadErrs are failures to read parts of the state (an artifact or
	// quarantine record that cannot be read).
	ReadErrs []Violation
	// RunWrites counts, by run id, the status writes of each run in the
	// store (its status.json's version), RunEvents the run's audit events
	// (run.status.update): every status write has one.
	RunWrites map[string]int64
	RunEvents map[string]int
	// Corrupted holds the keys the chaos loop overwrote with garbage;
	// Garbage what it wrote last at each, Current what is there now (nil:
	// absent).
	Corrupted map[string]bool
	Garbage   map[string][]byte
	Current   map[string][]byte
}

// decodeJob reads a job record the way a reader outside the SDK would:
// JSON of a job with this id, in a state of the job machine.
func decodeJob(id string, raw []byte) (*lifecycle.Job, string) {
	var j lifecycle.Job
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, "undecodable: " + err.Error()
	}
	if j.JobID != id {
		return nil, fmt.Sprintf("job_id %q in the record of %s", j.JobID, id)
	}
	if !slices.Contains(machine.JobStates(), j.Status) {
		return nil, fmt.Sprintf("status %q is not a job state", j.Status)
	}
	return &j, ""
}

// observe reads the state of a run from s: the job records always, the
// rest when full.
func observe(ctx context.Context, s *storage.Store, plan []Planned, full bool) (*State, error) {
	st := &State{Plan: plan, Records: map[string]Record{}, Corrupted: map[string]bool{},
		Garbage: map[string][]byte{}, Current: map[string][]byte{}}
	if err := st.readRecords(ctx, s, full); err != nil {
		return nil, err
	}
	if err := st.readQuarantine(ctx, s, full); err != nil {
		return nil, err
	}
	if !full {
		return st, nil
	}
	if err := st.readArtifacts(ctx, s); err != nil {
		return nil, err
	}
	st.readAudit(ctx, s)
	return st, nil
}

// readRecords reads the job record of every planned job (and, when full,
// whether a waiting job's ready-lane entry is there).
func (st *State) readRecords(ctx context.Context, s *storage.Store, full bool) error {
	for _, p := range st.Plan {
		key, err := layout.JobKey(p.JobID)
		if err != nil {
			return err
		}
		raw, _, err := s.Get(ctx, key)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			st.Records[p.JobID] = Record{}
			continue
		case err != nil:
			return err
		}
		j, why := decodeJob(p.JobID, raw)
		rec := Record{Present: true, Raw: raw, Job: j, Invalid: why}
		if full && j != nil && j.ReadyKey != "" && (j.Status == lifecycle.JobQueued || j.Status == lifecycle.JobRetryBackoff) {
			if _, _, err := s.Get(ctx, j.ReadyKey); errors.Is(err, storage.ErrNotFound) {
				rec.LaneMissing = true
			}
		}
		st.Records[p.JobID] = rec
	}
	return nil
}

// readQuarantine lists the quarantine; a listing error fails a quick
// observation and is a violation of a full one.
func (st *State) readQuarantine(ctx context.Context, s *storage.Store, full bool) error {
	for q, err := range records.ListQuarantine(ctx, s) {
		if err != nil {
			if !full {
				return err
			}
			st.ReadErrs = append(st.ReadErrs, Violation{CheckQuarantine, "quarantine/", "listing: " + err.Error()})
			break
		}
		st.Quarantine = append(st.Quarantine, q)
	}
	return nil
}

// readArtifacts lists the artifacts of the default project.
func (st *State) readArtifacts(ctx context.Context, s *storage.Store) error {
	q, err := jobqueue.New(jobqueue.Config{Store: s, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	for a, err := range q.Artifacts().List(ctx, lifecycle.ActorOrchestration, lifecycle.DefaultProject) {
		if err != nil {
			st.ReadErrs = append(st.ReadErrs, Violation{CheckArtifact, "projects/" + lifecycle.DefaultProject, "listing artifacts: " + err.Error()})
			break
		}
		st.Artifacts = append(st.Artifacts, a)
	}
	return nil
}

// readRunWrites reads the version (count of status writes) of every run.
func (st *State) readRunWrites(ctx context.Context, s *storage.Store) {
	for key, err := range s.List(ctx, "agents/") {
		if err != nil {
			st.ReadErrs = append(st.ReadErrs, Violation{CheckAudit, "agents/", "listing runs: " + err.Error()})
			break
		}
		parts := strings.Split(key, "/") // agents/{slug}/runs/{run id}/status.json
		if len(parts) != 5 || parts[2] != "runs" || parts[4] != "status.json" {
			continue
		}
		var doc struct {
			Version int64 `json:"version"`
		}
		if raw, _, err := s.Get(ctx, key); err == nil && json.Unmarshal(raw, &doc) == nil {
			st.RunWrites[parts[3]] = doc.Version
		}
	}
}

// readAudit reads the audit days around now, by job and by run, and
// replays them through the job machine.
func (st *State) readAudit(ctx context.Context, s *storage.Store) {
	now := time.Now()
	first, last := now.Add(-48*time.Hour), now.Add(time.Hour)
	st.Events = map[string][]lifecycle.AuditEvent{}
	st.RunWrites, st.RunEvents = map[string]int64{}, map[string]int{}
	st.readRunWrites(ctx, s)
	for day := first.UTC().Truncate(24 * time.Hour); !day.After(last.UTC()); day = day.Add(24 * time.Hour) {
		for e, err := range records.ReadAuditDay(ctx, s, day) {
			if err != nil {
				st.ReadErrs = append(st.ReadErrs, Violation{CheckAudit, layout.AuditDayPrefix(day), "reading: " + err.Error()})
				break
			}
			if e.JobID != "" {
				st.Events[e.JobID] = append(st.Events[e.JobID], e)
			}
			if e.Event == "run.status.update" && e.RunID != "" {
				st.RunEvents[e.RunID]++
			}
		}
	}
	for _, evs := range st.Events {
		slices.SortFunc(evs, func(a, b lifecycle.AuditEvent) int { return strings.Compare(a.ID, b.ID) })
	}
	st.Replayed, st.ReplayErr = jobaudit.Replay(ctx, s, first, last)
}

// quarantined tells whether the record of job id is in quarantine.
func (st *State) quarantined(id string) bool {
	key, _ := layout.JobKey(id)
	for _, q := range st.Quarantine {
		if q.Key == key {
			return true
		}
	}
	return false
}

// settled tells whether every job is COMPLETE, DEAD or quarantined.
func (st *State) settled() bool {
	for _, p := range st.Plan {
		rec := st.Records[p.JobID]
		if rec.Job != nil && terminal(rec.Job) {
			continue
		}
		if !rec.Present && st.quarantined(p.JobID) {
			continue
		}
		return false
	}
	return true
}

// Check judges st and returns every violation, in a stable order.
func Check(st *State) []Violation {
	c := &checker{st: st, planned: map[string]Planned{}, arts: map[string][]artifact.Artifact{}}
	c.vs = append(c.vs, st.ReadErrs...)
	for _, p := range st.Plan {
		c.planned[p.JobID] = p
	}
	for _, a := range st.Artifacts {
		c.arts[a.JobID] = append(c.arts[a.JobID], a)
	}
	c.terminal()
	c.artifacts()
	c.lateWrites()
	c.audit()
	c.quarantine()
	slices.SortStableFunc(c.vs, func(a, b Violation) int { return strings.Compare(a.Check, b.Check) })
	return c.vs
}

// checker gathers the violations of one State, check by check.
type checker struct {
	st      *State
	vs      []Violation
	planned map[string]Planned
	arts    map[string][]artifact.Artifact
}

func (c *checker) add(check, subject, format string, args ...any) {
	c.vs = append(c.vs, Violation{Check: check, Subject: subject, Detail: fmt.Sprintf(format, args...)})
}

// terminal: every job ends COMPLETE, DEAD or quarantined; its record
// agrees with what was enqueued.
func (c *checker) terminal() {
	st := c.st
	for _, p := range st.Plan {
		rec := st.Records[p.JobID]
		key, _ := layout.JobKey(p.JobID)
		switch {
		case rec.Job != nil:
			j := rec.Job
			if !terminal(j) {
				lease, lock := st.stuckDetail(p, rec)
				c.add(CheckTerminal, p.JobID, "stuck in %s (attempt %d/%d, error_code %q, %s)%s", j.Status, j.Attempt, j.MaxAttempts, j.ErrorCode, lease, lock)
			}
			if j.RunID != p.RunID || j.AgentSlug != p.AgentSlug {
				c.add(CheckTerminal, p.JobID, "record says run %s agent %s, enqueued as run %s agent %s", j.RunID, j.AgentSlug, p.RunID, p.AgentSlug)
			}
			if j.Attempt > j.MaxAttempts || j.Status == lifecycle.JobDead && j.Attempt != j.MaxAttempts {
				c.add(CheckTerminal, p.JobID, "%s after %d of %d attempts", j.Status, j.Attempt, j.MaxAttempts)
			}
		case rec.Present:
			by := "not by chaos"
			if st.Corrupted[key] {
				by = "corrupted by chaos"
			}
			c.add(CheckTerminal, p.JobID, "record is poison (%s, %s) and was not quarantined", rec.Invalid, by)
		case !st.quarantined(p.JobID):
			c.add(CheckTerminal, p.JobID, "record is gone and not in quarantine")
		}
	}
}

// stuckDetail says what holds a job that is not terminal: its lease, and
// what chaos left in its agent's way.
func (st *State) stuckDetail(p Planned, rec Record) (lease, lock string) {
	j := rec.Job
	lease = "no lease"
	if j.Lease != nil {
		lease = fmt.Sprintf("lease %s epoch %d expiring %s", j.Lease.Owner, j.Lease.Epoch, j.Lease.ExpiresAt.Format(time.RFC3339Nano))
	}
	if lk, _ := layout.AgentLockKey(p.AgentSlug); st.poisoned(lk) {
		lock = "; its agent lock " + lk + " still holds chaos's garbage"
	}
	for _, o := range st.Plan {
		if or := st.Records[o.JobID]; o.AgentSlug == p.AgentSlug && or.Present && or.Job == nil {
			lock += "; a poison job record of its agent (" + o.JobID + ") is still in place"
			break
		}
	}
	if rec.LaneMissing {
		lock += "; its ready-lane entry " + j.ReadyKey + " is missing (only a sweep relanes it)"
	}
	return lease, lock
}

// artifacts: exactly one per COMPLETE job, none for a job that is not
// COMPLETE, each agreeing with its job.
func (c *checker) artifacts() {
	st := c.st
	for _, a := range st.Artifacts {
		subj := a.ArtifactID
		p, ok := c.planned[a.JobID]
		if !ok {
			c.add(CheckArtifact, subj, "artifact of job %q, which was never enqueued", a.JobID)
			continue
		}
		if a.ArtifactID != artifact.IDForJob(a.JobID) {
			c.add(CheckArtifact, subj, "artifact id is not the one of job %s (%s)", a.JobID, artifact.IDForJob(a.JobID))
		}
		if !a.Finalized {
			c.add(CheckArtifact, subj, "artifact of %s is not finalized", a.JobID)
		}
		if a.RunID != p.RunID || a.AgentSlug != p.AgentSlug {
			c.add(CheckArtifact, subj, "artifact says job %s run %s agent %s; the job is run %s agent %s", a.JobID, a.RunID, a.AgentSlug, p.RunID, p.AgentSlug)
		}
	}
	for _, p := range st.Plan {
		rec := st.Records[p.JobID]
		as := c.arts[p.JobID]
		switch {
		case rec.Job != nil && rec.Job.Status == lifecycle.JobComplete:
			if len(as) != 1 {
				c.add(CheckArtifact, p.JobID, "COMPLETE with %d artifacts", len(as))
			}
			if rec.Job.ArtifactID != artifact.IDForJob(p.JobID) {
				c.add(CheckArtifact, p.JobID, "COMPLETE pointing at artifact %q, not %s", rec.Job.ArtifactID, artifact.IDForJob(p.JobID))
			}
		case rec.Job != nil && rec.Job.Status == lifecycle.JobDead:
			// A DEAD job may keep the artifact of an attempt whose commit
			// failed after the artifact was written: docs/spec.md#artifact lets only
			// the admin's cleanup delete artifacts, and a DEAD job never
			// points at one; nor at the artifact a writer that lost the job
			// created late (see the late writes below).
			if rec.Job.ArtifactID != "" {
				c.add(CheckArtifact, p.JobID, "DEAD job pointing at artifact %q", rec.Job.ArtifactID)
			}
		case rec.Job != nil && len(as) > 0:
			detail := ""
			if pr, ok := parseProducer(as[0].Content); ok {
				detail = fmt.Sprintf(" (written by %s at %s)", pr, as[0].CreatedAt.Format(time.RFC3339Nano))
			}
			c.add(CheckArtifact, p.JobID, "%s job (attempt %d/%d, last error %q) has an artifact%s", rec.Job.Status, rec.Job.Attempt, rec.Job.MaxAttempts, rec.Job.ErrorCode, detail)
		}
	}
}

// lateWrites: an artifact created after the attempt that produced it
// had lost the job (the attempt's end is in the job's audit trail), as
// the artifact a COMPLETE job points at. A writer frozen between its
// lease check and its create can still leave the artifact of a job that
// then ends DEAD (or FAILED): a single-key store cannot make that
// create depend on the job record, no record points at it, and an
// artifact counts only when a COMPLETE job points at it
// (docs/design.md#fencing-and-leases, "What stays, by physics"); the artifact check
// above holds every DEAD job to pointing at none.
func (c *checker) lateWrites() {
	st := c.st
	for _, a := range st.Artifacts {
		pr, ok := parseProducer(a.Content)
		if !ok {
			continue
		}
		if rec := st.Records[a.JobID]; rec.Job == nil || rec.Job.Status != lifecycle.JobComplete {
			continue
		}
		if end, ev, ok := attemptEnd(st.Events[a.JobID], pr.Attempt); ok && a.CreatedAt.After(end) {
			c.add(CheckLateWrite, a.JobID, "artifact created at %s by %s, %s after its attempt %d had ended (%s → %s at %s); the write should have been refused",
				a.CreatedAt.Format(time.RFC3339Nano), pr, a.CreatedAt.Sub(end).Round(time.Millisecond), pr.Attempt, ev.From, ev.To, end.Format(time.RFC3339Nano))
		}
	}
}

// audit: the audit log replays through the job machine to every record's
// state, and every status write of a run has its audit event.
func (c *checker) audit() {
	st := c.st
	if st.ReplayErr != nil {
		c.add(CheckAudit, "audit/", "does not replay: %v", st.ReplayErr)
	}
	if st.Replayed != nil {
		for _, p := range st.Plan {
			rec := st.Records[p.JobID]
			if rec.Job == nil {
				continue // quarantined, or already reported
			}
			if got := st.Replayed[p.JobID]; got != rec.Job.Status {
				why := ""
				if len(rec.Job.Trail) > 0 {
					last := rec.Job.Trail[len(rec.Job.Trail)-1]
					why = fmt.Sprintf(" (the record's trail ends %s → %s: its audit object is missing; a later write or a sweep writes it)", last.From, last.To)
				}
				c.add(CheckAudit, p.JobID, "audit replays to %q, the record says %s%s", got, rec.Job.Status, why)
			}
		}
	}

	// Every status write of a run has its audit event (a runner that
	// failed to write one leaves the run active until it is written).
	for id, n := range st.RunWrites {
		if got := int64(st.RunEvents[id]); got < n {
			c.add(CheckAudit, id, "%d status writes, %d audit events: %d missing", n, got, n-got)
		}
	}
}

// quarantine holds only what chaos corrupted; no poison stays in place.
func (c *checker) quarantine() {
	st := c.st
	for _, q := range st.Quarantine {
		if !st.Corrupted[q.Key] {
			c.add(CheckQuarantine, q.Key, "quarantined (%s) though chaos never corrupted it", q.Reason)
		}
	}
	for key := range st.Corrupted {
		if st.poisoned(key) && !isJobKey(st, key) {
			c.add(CheckQuarantine, key, "still holds the garbage chaos wrote: neither quarantined nor repaired")
		}
	}
}

// attemptEnd finds when attempt n of a job lost the job: the first move
// to RETRY_BACKOFF after its pickup (QUEUED → CONTEXT_ASSEMBLY), by
// whoever made it. It is false when attempt n ended otherwise (COMPLETE) or
// the trail does not say.
func attemptEnd(evs []lifecycle.AuditEvent, n int) (time.Time, lifecycle.AuditEvent, bool) {
	pickups := 0
	for _, e := range evs {
		if !strings.HasPrefix(e.Event, "job.") {
			continue
		}
		if to := lifecycle.JobState(e.To); to == lifecycle.JobContextAssembly || to == lifecycle.JobRunning { // the pickup, on either job machine
			pickups++
			continue
		}
		if pickups == n {
			switch lifecycle.JobState(e.To) {
			case lifecycle.JobRetryBackoff:
				return e.TS, e, true
			case lifecycle.JobComplete:
				return time.Time{}, e, false
			}
		}
	}
	return time.Time{}, lifecycle.AuditEvent{}, false
}

// isJobKey tells whether key is the record of a planned job (judged by the
// terminal check).
func isJobKey(st *State, key string) bool {
	for _, p := range st.Plan {
		if k, _ := layout.JobKey(p.JobID); k == key {
			return true
		}
	}
	return false
}

// poisoned tells whether key still holds the garbage chaos wrote there.
func (st *State) poisoned(key string) bool {
	g, ok := st.Garbage[key]
	return ok && st.Current[key] != nil && bytes.Equal(g, st.Current[key])
}

// terminal tells whether j is at rest on its machine; a machine this
// release does not know (a later one's) counts as not at rest.
func terminal(j *lifecycle.Job) bool {
	m := machine.JobMachineNamed(j.Machine)
	return m != nil && m.IsTerminal(j.Status)
}
