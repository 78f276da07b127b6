package run

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// The data a wait hands to the steps after it (docs/design.md#runs): an
// approval's decision and an external event, each with an optional JSON
// payload. The payload is kept in a record of its own beside the run,
// waits/{sha256}.json, written create-only before the status write that
// names it; the status keeps who, why and the payload's name. So a runner
// taking the run over reads it as the first one would, and the status,
// rewritten at every heartbeat and read by every list, stays small.

// waitRecordSchema is the version of a wait record. A reader refuses a
// record of another version rather than hand a step what it misreads.
const waitRecordSchema = 1

// waitRecord is the body of waits/{sha256}.json.
type waitRecord struct {
	Schema  int             `json:"schema"`
	Payload json.RawMessage `json:"payload"`
}

// payloadOf checks a caller's payload and returns it compacted (numbers and
// key order as given) with its sha256, or nil when there is none (empty or
// JSON null). It refuses, writing nothing, what is not JSON, not clean
// UTF-8 or over MaxDocumentBytes.
func payloadOf(raw json.RawMessage) ([]byte, string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, "", nil
	}
	if err := codes.CheckJSON("payload", raw, codes.MaxDocumentBytes); err != nil {
		return nil, "", err
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, "", &RequestError{Field: "payload", Reason: "not valid JSON"}
	}
	if b.String() == "null" {
		return nil, "", nil
	}
	sum := sha256.Sum256(b.Bytes())
	return b.Bytes(), hex.EncodeToString(sum[:]), nil
}

// waitData is a payload on its way to the store: written once the run is
// known, before the status write that names it.
type waitData struct {
	payload []byte
	sha     string
	written bool
}

func newWaitData(raw json.RawMessage) (*waitData, error) {
	p, sha, err := payloadOf(raw)
	if err != nil {
		return nil, err
	}
	return &waitData{payload: p, sha: sha}, nil
}

// write stores the payload beside the run, create-only (a record of the
// same name holds the same payload), once per control call.
func (wd *waitData) write(ctx context.Context, store *storage.Store, slug, runID string) error {
	if wd.payload == nil || wd.written {
		return nil
	}
	key, err := layout.RunWaitKey(slug, runID, wd.sha)
	if err != nil {
		return err
	}
	body, err := json.Marshal(waitRecord{Schema: waitRecordSchema, Payload: wd.payload})
	if err != nil {
		return err
	}
	if err := putOnce(ctx, store, key, body); err != nil {
		return err
	}
	wd.written = true
	return nil
}

// bytesLen is the payload's size, 0 when none.
func (wd *waitData) bytesLen() int { return len(wd.payload) }

// readPayload reads the payload a status names. On a store that settles a
// record just written may read missing for a while, so one not-found is
// read again after the settle time; a record still missing, unreadable or
// of another schema fails the run (RUN_RESUME_FAILED): its step would run
// without what it was given.
func (e *executor) readPayload(ctx context.Context, doc lifecycle.RunStatus, sha string) (json.RawMessage, error) {
	key, err := layout.RunWaitKey(doc.AgentSlug, doc.RunID, sha)
	if err != nil {
		return nil, lifecycle.NewRunError(codes.RunResumeFailed, "payload %s: %v", sha, err)
	}
	b, _, err := e.store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) && e.absent.Settle > 0 {
		if err = activity.Sleep(ctx, e.cfg.Clock, e.absent.Settle); err == nil {
			b, _, err = e.store.Get(ctx, key)
		}
	}
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil, lifecycle.NewRunError(codes.RunResumeFailed, "payload %s of the run's last wait is missing", sha)
	case err != nil:
		return nil, err
	}
	var rec waitRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Schema != waitRecordSchema {
		return nil, lifecycle.NewRunError(codes.RunResumeFailed, "payload %s: not a wait record of schema %d", sha, waitRecordSchema)
	}
	// The record is named by its payload's hash: one whose payload hashes
	// otherwise is not what was decided or delivered, and is not handed on.
	if sum := sha256.Sum256(rec.Payload); hex.EncodeToString(sum[:]) != sha {
		return nil, lifecycle.NewRunError(codes.RunResumeFailed, "payload %s: the record holds another payload", sha)
	}
	return rec.Payload, nil
}

// waitInputs is what the run's last approval and last external event hand
// to the steps after them.
type waitInputs struct {
	approval      *Decision
	approvalAfter int
	event         *ExternalEvent
	eventAfter    int
}

// loadWaits reads what doc's waits hand on: an approved decision and a
// received event, each to the steps after the one that waited. A record
// written before waits kept their step (AfterStep 0) hands nothing, as
// then.
func (e *executor) loadWaits(ctx context.Context, doc lifecycle.RunStatus) (waitInputs, error) {
	var w waitInputs
	if a := doc.Approval; a != nil && a.Decision == "approved" && a.AfterStep > 0 {
		dec := &Decision{DecidedBy: a.DecidedBy, Reason: a.Reason}
		if a.PayloadSHA256 != "" {
			p, err := e.readPayload(ctx, doc, a.PayloadSHA256)
			if err != nil {
				return w, err
			}
			dec.Payload = p
		}
		w.approval, w.approvalAfter = dec, a.AfterStep
	}
	if ev := doc.External; ev != nil && ev.ReceivedAt != nil && ev.AfterStep > 0 {
		got := &ExternalEvent{Type: ev.EventType, ID: ev.EventID, Source: ev.Source}
		if ev.PayloadSHA256 != "" {
			p, err := e.readPayload(ctx, doc, ev.PayloadSHA256)
			if err != nil {
				return w, err
			}
			got.Payload = p
		}
		w.event, w.eventAfter = got, ev.AfterStep
	}
	return w, nil
}

// fill gives step n (1-based) the waits that came before it. Each step
// gets its own copy, so one step changing it cannot change the next's.
func (w waitInputs) fill(in *StepInput) {
	if w.approval != nil && w.approvalAfter < in.Step {
		d := *w.approval
		d.Payload = bytes.Clone(d.Payload)
		in.Approval = &d
	}
	if w.event != nil && w.eventAfter < in.Step {
		e := *w.event
		e.Payload = bytes.Clone(e.Payload)
		in.Event = &e
	}
}
