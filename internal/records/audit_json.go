package records

import (
	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/lifecycle"
)

// MarshalAudit encodes an audit event as json.Marshal would, through the
// hand-written encoder below.
func MarshalAudit(ev *lifecycle.AuditEvent) ([]byte, error) {
	return jsonenc.Marshal((*auditJSON)(ev))
}

// auditJSON is an audit event with its hand-written encoder.
type auditJSON lifecycle.AuditEvent

// AppendJSON appends the event's JSON, byte for byte what json.Marshal
// writes for it (TestAuditEventJSON holds it to that): every job that
// comes to rest writes one, and reflection was a large share of a job's
// CPU outside the store (docs/performance.md). A field added to AuditEvent
// must be added here; the test fails until it is.
func (ev *auditJSON) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"ts":`...)
	b, err := jsonenc.Time(b, ev.TS)
	if err != nil {
		return b, err
	}
	b = append(b, `,"event":`...)
	b = jsonenc.String(b, ev.Event)
	b = append(b, `,"actor":`...)
	b = jsonenc.String(b, ev.Actor)
	b = jsonenc.OmitEmpty(b, `,"job_id":`, ev.JobID)
	b = jsonenc.OmitEmpty(b, `,"run_id":`, ev.RunID)
	b = jsonenc.OmitEmpty(b, `,"entry_id":`, ev.EntryID)
	b = jsonenc.OmitEmpty(b, `,"artifact_id":`, ev.ArtifactID)
	b = jsonenc.OmitEmpty(b, `,"proposal_id":`, ev.ProposalID)
	b = jsonenc.OmitEmpty(b, `,"tenant_id":`, ev.TenantID)
	b = append(b, `,"from":`...)
	b = jsonenc.String(b, ev.From)
	b = append(b, `,"to":`...)
	b = jsonenc.String(b, ev.To)
	b = append(b, `,"node":`...)
	b = jsonenc.String(b, ev.Node)
	if len(ev.Context) > 0 {
		b = append(b, `,"context":`...)
		if b, err = jsonenc.Raw(b, ev.Context); err != nil {
			return b, err
		}
	}
	if len(ev.Prior) > 0 {
		b = append(b, `,"prior":[`...)
		for i := range ev.Prior {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = (*auditJSON)(&ev.Prior[i]).AppendJSON(b); err != nil {
				return b, err
			}
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}
