package jobqueue

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/lifecycle"
)

// AppendJSON appends the job record's JSON, byte for byte what json.Marshal
// writes for it (TestJobDocJSON holds it to that, with every field set):
// every job write encodes its record, and reflection was the largest share
// of a job's CPU outside the store (docs/performance.md). A field added to
// jobDoc or lifecycle.Job must be added here; the test fails until it is.
func (d *jobDoc) AppendJSON(b []byte) ([]byte, error) {
	j := &d.Job
	b, err := appendJobHead(b, d)
	if err != nil {
		return b, err
	}
	if b, err = appendJobOutcome(b, j); err != nil {
		return b, err
	}
	if b, err = appendSchedule(b, j); err != nil {
		return b, err
	}
	b = jsonenc.OmitEmpty(b, `,"ready_key":`, j.ReadyKey)
	if b, err = appendLease(b, j.Lease); err != nil {
		return b, err
	}
	if b, err = appendTrail(b, j.Trail); err != nil {
		return b, err
	}
	b = jsonenc.OmitEmpty(b, `,"traceparent":`, j.TraceParent)
	if j.Duplicate { // an insert's answer only: never in a stored record
		b = append(b, `,"duplicate":true`...)
	}
	b = jsonenc.OmitEmpty(b, `,"audit_artifact":`, d.AuditArtifact)
	if d.RanEpoch != 0 {
		b = append(b, `,"ran_epoch":`...)
		b = jsonenc.Int(b, d.RanEpoch)
	}
	return append(b, '}'), nil
}

// appendJobHead opens the record and appends its members from "version"
// to "updated_at": what every job has from its insert on.
func appendJobHead(b []byte, d *jobDoc) ([]byte, error) {
	j := &d.Job
	b = append(b, `{"version":`...)
	b = jsonenc.Int(b, d.Version)
	b = append(b, `,"job_id":`...)
	b = jsonenc.String(b, j.JobID)
	b = append(b, `,"run_id":`...)
	b = jsonenc.String(b, j.RunID)
	b = append(b, `,"job_type":`...)
	b = jsonenc.String(b, string(j.JobType))
	b = append(b, `,"agent_slug":`...)
	b = jsonenc.String(b, j.AgentSlug)
	b = append(b, `,"status":`...)
	b = jsonenc.String(b, string(j.Status))
	b = append(b, `,"attempt":`...)
	b = jsonenc.Int(b, int64(j.Attempt))
	b = append(b, `,"max_attempts":`...)
	b = jsonenc.Int(b, int64(j.MaxAttempts))
	var err error
	if len(j.Payload) > 0 {
		b = append(b, `,"payload":`...)
		if b, err = jsonenc.Raw(b, j.Payload); err != nil {
			return b, err
		}
	}
	b = appendJobContext(b, &j.Context)
	b = jsonenc.OmitEmpty(b, `,"callback":`, j.Callback)
	b = append(b, `,"created_at":`...)
	if b, err = jsonenc.Time(b, j.CreatedAt); err != nil {
		return b, err
	}
	b = append(b, `,"updated_at":`...)
	return jsonenc.Time(b, j.UpdatedAt)
}

// appendJobOutcome appends the members from "artifact_id" to
// "next_attempt_at": what the job's runs, failures and cancel left, all
// but "error" omitted when empty.
func appendJobOutcome(b []byte, j *lifecycle.Job) ([]byte, error) {
	b = jsonenc.OmitEmpty(b, `,"artifact_id":`, j.ArtifactID)
	b = append(b, `,"error":`...)
	if j.Error == nil {
		b = append(b, "null"...)
	} else {
		b = jsonenc.String(b, *j.Error)
	}
	b = jsonenc.OmitEmpty(b, `,"machine":`, j.Machine)
	b = jsonenc.OmitEmpty(b, `,"tenant_id":`, j.TenantID)
	b, err := appendOptTime(b, `,"cancel_requested_at":`, j.CancelRequestedAt)
	if err != nil {
		return b, err
	}
	b = jsonenc.OmitEmpty(b, `,"cancel_requested_by":`, string(j.CancelRequestedBy))
	b = jsonenc.OmitEmpty(b, `,"project_id":`, j.ProjectID)
	b = jsonenc.OmitEmpty(b, `,"error_code":`, j.ErrorCode)
	b = jsonenc.OmitEmpty(b, `,"failed_step":`, string(j.FailedStep))
	if b, err = appendOptTime(b, `,"queued_at":`, j.QueuedAt); err != nil {
		return b, err
	}
	return appendOptTime(b, `,"next_attempt_at":`, j.NextAttemptAt)
}

// appendOptTime appends the member name (with its leading comma) and t,
// omitted when t is nil.
func appendOptTime(b []byte, name string, t *time.Time) ([]byte, error) {
	if t == nil {
		return b, nil
	}
	b = append(b, name...)
	return jsonenc.Time(b, *t)
}

// appendSchedule appends the "priority" and "scheduled_at" members, each
// omitted when empty.
func appendSchedule(b []byte, j *lifecycle.Job) ([]byte, error) {
	if j.Priority != 0 {
		b = append(b, `,"priority":`...)
		b = jsonenc.Int(b, int64(j.Priority))
	}
	if j.ScheduledAt == nil {
		return b, nil
	}
	b = append(b, `,"scheduled_at":`...)
	return jsonenc.Time(b, *j.ScheduledAt)
}

// appendJobContext appends the "context" member (never omitted, its
// members omitted when empty).
func appendJobContext(b []byte, c *lifecycle.JobContext) []byte {
	b = append(b, `,"context":{`...)
	sep := byte(0)
	if c.MemorySnapshotURL != "" {
		b = append(b, `"memory_snapshot_url":`...)
		b = jsonenc.String(b, c.MemorySnapshotURL)
		sep = ','
	}
	if len(c.EntityRefs) > 0 {
		if sep != 0 {
			b = append(b, sep)
		}
		b = append(b, `"entity_refs":[`...)
		for i, r := range c.EntityRefs {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(b, r)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendLease appends the "lease" member, omitted when l is nil.
func appendLease(b []byte, l *lifecycle.Lease) ([]byte, error) {
	if l == nil {
		return b, nil
	}
	b = append(b, `,"lease":{"owner":`...)
	b = jsonenc.String(b, l.Owner)
	b = append(b, `,"epoch":`...)
	b = jsonenc.Int(b, l.Epoch)
	b = append(b, `,"expires_at":`...)
	b, err := jsonenc.Time(b, l.ExpiresAt)
	if err != nil {
		return b, err
	}
	if l.Slot != 0 {
		b = append(b, `,"slot":`...)
		b = jsonenc.Int(b, int64(l.Slot))
	}
	return append(b, '}'), nil
}

// appendTrail appends the "trail" member, omitted when empty.
func appendTrail(b []byte, trail []lifecycle.JobMove) ([]byte, error) {
	if len(trail) == 0 {
		return b, nil
	}
	b = append(b, `,"trail":[`...)
	for i := range trail {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendMove(b, &trail[i]); err != nil {
			return b, err
		}
	}
	return append(b, ']'), nil
}

func appendMove(b []byte, m *lifecycle.JobMove) ([]byte, error) {
	b = append(b, `{"from":`...)
	b = jsonenc.String(b, string(m.From))
	b = append(b, `,"to":`...)
	b = jsonenc.String(b, string(m.To))
	b = append(b, `,"event":`...)
	b = jsonenc.String(b, string(m.Event))
	b = append(b, `,"actor":`...)
	b = jsonenc.String(b, string(m.Actor))
	if !m.At.IsZero() {
		b = append(b, `,"at":`...)
		var err error
		if b, err = jsonenc.Time(b, m.At); err != nil {
			return b, err
		}
	}
	b = jsonenc.OmitEmpty(b, `,"error_code":`, m.ErrorCode)
	b = jsonenc.OmitEmpty(b, `,"error":`, m.Error)
	return append(b, '}'), nil
}

// DecodeJSON decodes a job record as json.Unmarshal does, into a zero
// jobDoc (fence.Decode's): the record as AppendJSON writes it (its members
// by their names, in any order) without reflection, anything else by
// json.Unmarshal itself (FuzzJobDocDecode compares the two). Every job's
// pickup reads its record, and reflection made that read a large share of
// a job's CPU outside the store (docs/performance.md).
func (d *jobDoc) DecodeJSON(b []byte) error {
	_, err := d.DecodeKnown(b)
	return err
}

// DecodeKnown is DecodeJSON telling whether it read the record without
// json.Unmarshal: then every member had a name of the record's own, and
// there is no unknown member to keep for the next write (records.Decode).
func (d *jobDoc) DecodeKnown(b []byte) (allKnown bool, err error) {
	r := jsonenc.NewReader(b)
	if d.read(&r) && r.End() {
		return true, nil
	}
	*d = jobDoc{}
	return false, json.Unmarshal(b, d)
}

func (d *jobDoc) read(r *jsonenc.Reader) bool {
	if !r.Open('{') {
		return false
	}
	var seen uint64
	for first := true; r.More('}', first); first = false {
		// bit numbers the member, for the set of those read so far: a name
		// read twice is left to json.Unmarshal (it merges objects, a
		// Reader does not).
		key := r.Key()
		bit, known := d.readRecord(r, key)
		if !known {
			bit, known = d.readProgress(r, key)
		}
		if !known {
			return false
		}
		if !r.OK() || seen&(1<<bit) != 0 {
			return false
		}
		seen |= 1 << bit
	}
	return r.OK()
}

// readRecord reads member key of the record as Enqueue writes it (bit:
// its number, for read's set of those read); known is false for another.
func (d *jobDoc) readRecord(r *jsonenc.Reader, key []byte) (bit uint, known bool) {
	j := &d.Job
	switch string(key) {
	case "version":
		bit = 0
		d.Version = r.Int()
	case "job_id":
		bit = 1
		j.JobID = r.String()
	case "run_id":
		bit = 2
		j.RunID = r.String()
	case "job_type":
		bit = 3
		j.JobType = jsonenc.Enum(r, knownTypes)
	case "agent_slug":
		bit = 4
		j.AgentSlug = r.String()
	case "status":
		bit = 5
		j.Status = jsonenc.Enum(r, knownStates)
	case "attempt":
		bit = 6
		j.Attempt = int(r.Int())
	case "max_attempts":
		bit = 7
		j.MaxAttempts = int(r.Int())
	case "payload":
		bit = 8
		j.Payload = r.Raw()
	case "context":
		bit = 9
		readJobContext(r, &j.Context)
	case "callback":
		bit = 10
		j.Callback = r.String()
	case "created_at":
		bit = 11
		j.CreatedAt = r.Time()
	case "updated_at":
		bit = 12
		j.UpdatedAt = r.Time()
	default:
		return 0, false
	}
	return bit, true
}

// readProgress is readRecord for the members a job's run and its
// retries write.
func (d *jobDoc) readProgress(r *jsonenc.Reader, key []byte) (bit uint, known bool) {
	j := &d.Job
	switch string(key) {
	case "artifact_id":
		bit = 13
		j.ArtifactID = r.String()
	case "error":
		bit = 14
		if !r.Null() {
			s := r.String()
			j.Error = &s
		}
	case "project_id":
		bit = 15
		j.ProjectID = r.String()
	case "error_code":
		bit = 16
		j.ErrorCode = r.String()
	case "failed_step":
		bit = 17
		j.FailedStep = jsonenc.Enum(r, knownStates)
	case "queued_at":
		bit = 18
		t := r.Time()
		j.QueuedAt = &t
	case "next_attempt_at":
		bit = 19
		t := r.Time()
		j.NextAttemptAt = &t
	case "ready_key":
		bit = 20
		j.ReadyKey = r.String()
	case "lease":
		bit = 21
		j.Lease = readLease(r)
	case "trail":
		bit = 22
		j.Trail = readTrail(r)
	case "traceparent":
		bit = 23
		j.TraceParent = r.String()
	case "audit_artifact":
		bit = 24
		d.AuditArtifact = r.String()
	case "ran_epoch":
		bit = 25
		d.RanEpoch = r.Int()
	case "priority":
		bit = 26
		j.Priority = int(r.Int())
	case "scheduled_at":
		bit = 27
		t := r.Time()
		j.ScheduledAt = &t
	case "machine":
		bit = 28
		j.Machine = jsonenc.Enum(r, knownMachines)
	case "cancel_requested_at":
		bit = 29
		t := r.Time()
		j.CancelRequestedAt = &t
	case "cancel_requested_by":
		bit = 30
		j.CancelRequestedBy = jsonenc.Enum(r, knownActors)
	case "tenant_id":
		bit = 31
		j.TenantID = r.String()
	default:
		return 0, false
	}
	return bit, true
}

// The names a job record holds again and again, which DecodeJSON returns
// without copying them from the record's bytes. Never written after init.
var (
	knownStates              = slices.Concat(machine.JobStates(), []lifecycle.JobState{lifecycle.JobRunning, lifecycle.JobCancelled})
	knownMachines            = []string{machine.JobMachineSpecName, lifecycle.JobMachineGeneral}
	knownTypes               = []lifecycle.JobType{lifecycle.JobResearch, lifecycle.JobBrief, lifecycle.JobProposalPreprocess}
	knownEvents, knownActors = func() (events []lifecycle.Event, actors []lifecycle.Actor) {
		for _, t := range slices.Concat(machine.JobMachine().Transitions(), machine.GeneralJobMachine().Transitions()) {
			if !slices.Contains(events, t.Event) {
				events = append(events, t.Event)
			}
			for _, a := range t.Actors {
				if !slices.Contains(actors, a) {
					actors = append(actors, a)
				}
			}
		}
		return events, actors
	}()
)

func readJobContext(r *jsonenc.Reader, c *lifecycle.JobContext) {
	if !r.Open('{') {
		return
	}
	var url, refs bool
	for first := true; r.More('}', first); first = false {
		switch key := r.Key(); {
		case string(key) == "memory_snapshot_url" && !url:
			c.MemorySnapshotURL, url = r.String(), true
		case string(key) == "entity_refs" && !refs:
			refs = true
			if !r.Open('[') {
				return
			}
			c.EntityRefs = []string{}
			for first := true; r.More(']', first); first = false {
				c.EntityRefs = append(c.EntityRefs, r.String())
			}
		default:
			r.Fail()
			return
		}
	}
}

func readLease(r *jsonenc.Reader) *lifecycle.Lease {
	if !r.Open('{') {
		return nil
	}
	l := &lifecycle.Lease{}
	var seen [4]bool
	for first := true; r.More('}', first); first = false {
		switch key := r.Key(); {
		case string(key) == "owner" && !seen[0]:
			l.Owner, seen[0] = r.String(), true
		case string(key) == "epoch" && !seen[1]:
			l.Epoch, seen[1] = r.Int(), true
		case string(key) == "expires_at" && !seen[2]:
			l.ExpiresAt, seen[2] = r.Time(), true
		case string(key) == "slot" && !seen[3]:
			l.Slot, seen[3] = int(r.Int()), true
		default:
			r.Fail()
			return nil
		}
	}
	return l
}

func readTrail(r *jsonenc.Reader) []lifecycle.JobMove {
	if !r.Open('[') {
		return nil
	}
	trail := make([]lifecycle.JobMove, 0, 8)
	for first := true; r.More(']', first); first = false {
		var m lifecycle.JobMove
		if !r.Open('{') {
			return nil
		}
		var seen [7]bool
		for first := true; r.More('}', first); first = false {
			switch key := r.Key(); {
			case string(key) == "from" && !seen[0]:
				m.From, seen[0] = jsonenc.Enum(r, knownStates), true
			case string(key) == "to" && !seen[1]:
				m.To, seen[1] = jsonenc.Enum(r, knownStates), true
			case string(key) == "event" && !seen[2]:
				m.Event, seen[2] = jsonenc.Enum(r, knownEvents), true
			case string(key) == "actor" && !seen[3]:
				m.Actor, seen[3] = jsonenc.Enum(r, knownActors), true
			case string(key) == "at" && !seen[4]:
				m.At, seen[4] = r.Time(), true
			case string(key) == "error_code" && !seen[5]:
				m.ErrorCode, seen[5] = r.String(), true
			case string(key) == "error" && !seen[6]:
				m.Error, seen[6] = r.String(), true
			default:
				r.Fail()
				return nil
			}
		}
		trail = append(trail, m)
	}
	return trail
}

// AppendJSON appends the agent lock's JSON, byte for byte what json.Marshal
// writes for it (TestLockAndLaneJSON): every claim writes the lock.
func (l *agentLock) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"version":`...)
	b = jsonenc.Int(b, l.Version)
	b = append(b, `,"agent":`...)
	b = jsonenc.String(b, l.Agent)
	b = jsonenc.OmitEmpty(b, `,"owner":`, l.Owner)
	b = append(b, `,"epoch":`...)
	b = jsonenc.Int(b, l.Epoch)
	b = jsonenc.OmitEmpty(b, `,"job_id":`, l.JobID)
	if !l.ExpiresAt.IsZero() {
		b = append(b, `,"expires_at":`...)
		var err error
		if b, err = jsonenc.Time(b, l.ExpiresAt); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

// encode appends the bytes the lock is stored as: AppendJSON's, then the
// members its Meta kept from the lock it was read from (records.Encode's
// rule for every other record kind).
func (l *agentLock) encode(b []byte) ([]byte, error) {
	b, err := l.AppendJSON(b)
	if err != nil || l.Unknown == "" {
		return b, err
	}
	b = append(b[:len(b)-1], ',') // AppendJSON's object is never empty
	b = append(b, l.Unknown...)
	return append(b, '}'), nil
}

// AppendJSON appends the lane entry's JSON, byte for byte what
// json.Marshal writes for it (TestLockAndLaneJSON): every enqueue writes one.
func (e *laneEntry) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"job_id":`...)
	b = jsonenc.String(b, e.JobID)
	b = append(b, `,"ready_at":`...)
	b, err := jsonenc.Time(b, e.ReadyAt)
	if err != nil {
		return b, err
	}
	return append(b, '}'), nil
}
