package jobqueue

import (
	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/lifecycle"
)

// AppendJSON appends the job record's JSON, byte for byte what json.Marshal
// writes for it (TestJobDocJSON holds it to that, with every field set):
// every job write encodes its record, and reflection was the largest share
// of a job's CPU outside the store (docs/performance.md). A field added to
// jobDoc or lifecycle.Job must be added here; the test fails until it is.
func (d *jobDoc) AppendJSON(b []byte) ([]byte, error) {
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
	b = append(b, `,"context":{`...)
	sep := byte(0)
	if j.Context.MemorySnapshotURL != "" {
		b = append(b, `"memory_snapshot_url":`...)
		b = jsonenc.String(b, j.Context.MemorySnapshotURL)
		sep = ','
	}
	if len(j.Context.EntityRefs) > 0 {
		if sep != 0 {
			b = append(b, sep)
		}
		b = append(b, `"entity_refs":[`...)
		for i, r := range j.Context.EntityRefs {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(b, r)
		}
		b = append(b, ']')
	}
	b = append(b, '}')
	b = jsonenc.OmitEmpty(b, `,"callback":`, j.Callback)
	b = append(b, `,"created_at":`...)
	if b, err = jsonenc.Time(b, j.CreatedAt); err != nil {
		return b, err
	}
	b = append(b, `,"updated_at":`...)
	if b, err = jsonenc.Time(b, j.UpdatedAt); err != nil {
		return b, err
	}
	b = jsonenc.OmitEmpty(b, `,"artifact_id":`, j.ArtifactID)
	b = append(b, `,"error":`...)
	if j.Error == nil {
		b = append(b, "null"...)
	} else {
		b = jsonenc.String(b, *j.Error)
	}
	b = jsonenc.OmitEmpty(b, `,"project_id":`, j.ProjectID)
	b = jsonenc.OmitEmpty(b, `,"error_code":`, j.ErrorCode)
	b = jsonenc.OmitEmpty(b, `,"failed_step":`, string(j.FailedStep))
	if j.QueuedAt != nil {
		b = append(b, `,"queued_at":`...)
		if b, err = jsonenc.Time(b, *j.QueuedAt); err != nil {
			return b, err
		}
	}
	if j.NextAttemptAt != nil {
		b = append(b, `,"next_attempt_at":`...)
		if b, err = jsonenc.Time(b, *j.NextAttemptAt); err != nil {
			return b, err
		}
	}
	b = jsonenc.OmitEmpty(b, `,"ready_key":`, j.ReadyKey)
	if l := j.Lease; l != nil {
		b = append(b, `,"lease":{"owner":`...)
		b = jsonenc.String(b, l.Owner)
		b = append(b, `,"epoch":`...)
		b = jsonenc.Int(b, l.Epoch)
		b = append(b, `,"expires_at":`...)
		if b, err = jsonenc.Time(b, l.ExpiresAt); err != nil {
			return b, err
		}
		b = append(b, '}')
	}
	if len(j.Trail) > 0 {
		b = append(b, `,"trail":[`...)
		for i := range j.Trail {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendMove(b, &j.Trail[i]); err != nil {
				return b, err
			}
		}
		b = append(b, ']')
	}
	b = jsonenc.OmitEmpty(b, `,"traceparent":`, j.TraceParent)
	b = jsonenc.OmitEmpty(b, `,"audit_artifact":`, d.AuditArtifact)
	if d.RanEpoch != 0 {
		b = append(b, `,"ran_epoch":`...)
		b = jsonenc.Int(b, d.RanEpoch)
	}
	return append(b, '}'), nil
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
	return append(b, '}'), nil
}
