package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// checkContentType refuses a body that is not application/json (a charset
// parameter, if any, must be utf-8). A request without a body needs no
// content type.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return apiErr(codes.UnsupportedMediaType, "the body must be application/json, not %q", ct)
	}
	for k, v := range params {
		if k != "charset" || (v != "utf-8" && v != "UTF-8") {
			return apiErr(codes.UnsupportedMediaType, "the body must be application/json in UTF-8, not %q", ct)
		}
	}
	return nil
}

// readBody reads a request body bounded by the route's MaxBytesReader: too
// long is INPUT_TOO_LARGE; invalid UTF-8 or a lone surrogate escape
// anywhere in it is INVALID_INPUT (codes.CheckJSON).
func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, apiErr(codes.InputTooLarge, "the body is over %d bytes", mbe.Limit)
	}
	if err != nil {
		return nil, apiErr(codes.InvalidRequest, "reading the body: %v", err)
	}
	// Before decoding: encoding/json replaces invalid UTF-8 and lone
	// surrogate escapes with U+FFFD without a word, so a field checked after
	// decoding looks clean and what is stored is not what was sent. One
	// check of the raw bytes covers every field and every map key.
	if err := codes.CheckJSON("body", b, len(b)); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeStrict decodes exactly one JSON value into v: an unknown field or
// anything after the value is an INVALID_REQUEST. An empty body is one only
// when optional is false; otherwise v stays zero.
func decodeStrict(data []byte, v any, optional bool) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return apiErr(codes.InvalidRequest, "a JSON body is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apiErr(codes.InvalidRequest, "malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return apiErr(codes.InvalidRequest, "malformed JSON body: data after the JSON value")
	}
	return nil
}

// decodeSubmit decodes and checks POST /agents/run's body.
func decodeSubmit(data []byte) (wire.SubmitBody, error) {
	var b wire.SubmitBody
	if err := decodeStrict(data, &b, false); err != nil {
		return b, err
	}
	if b.AgentSlug == "" {
		return b, apiErr(codes.InvalidRequest, "agent_slug is required")
	}
	if err := storekey.ValidateID("agent_slug", b.AgentSlug); err != nil {
		return b, err
	}
	return b, nil
}

// decodeEvent decodes and checks POST /runs/{runId}/events' body.
func decodeEvent(data []byte) (wire.EventBody, error) {
	var b wire.EventBody
	if err := decodeStrict(data, &b, false); err != nil {
		return b, err
	}
	if b.Type == "" {
		return b, apiErr(codes.InvalidRequest, "type is required")
	}
	return b, nil
}

// decodeJob decodes and checks POST /jobs' body: job_type is required,
// the rest is optional; the queue checks the values (Enqueue).
func decodeJob(data []byte) (jobqueue.NewJob, error) {
	var b wire.JobBody
	if err := decodeStrict(data, &b, false); err != nil {
		return jobqueue.NewJob{}, err
	}
	return checkJob(b, "")
}

// checkJob checks one job of a body (field prefixes its fields' names).
func checkJob(b wire.JobBody, field string) (jobqueue.NewJob, error) {
	// A job needs only its type: run_id and agent_slug are optional, as in
	// jobqueue.NewJob (a job without an agent runs in its type's lane).
	if b.JobType == "" {
		return jobqueue.NewJob{}, apiErr(codes.InvalidRequest, "%sjob_type is required", field)
	}
	if b.JobID != "" {
		if err := storekey.ValidateID(field+"job_id", b.JobID); err != nil {
			return jobqueue.NewJob{}, err
		}
	}
	var delay time.Duration
	if b.Delay != "" {
		d, err := time.ParseDuration(b.Delay)
		if err != nil {
			return jobqueue.NewJob{}, apiErr(codes.InvalidRequest, "%sdelay %q is not a duration (\"90s\", \"2h30m\")", field, b.Delay)
		}
		delay = d
	}
	unique, err := checkUnique(b.Unique, field)
	if err != nil {
		return jobqueue.NewJob{}, err
	}
	return jobqueue.NewJob{JobID: b.JobID, RunID: b.RunID, JobType: b.JobType, AgentSlug: b.AgentSlug,
		MaxAttempts: b.MaxAttempts, Payload: b.Payload, Context: b.Context, Callback: b.Callback, ProjectID: b.ProjectID,
		Priority: b.Priority, RunAt: b.RunAt, Delay: delay, Queue: b.Queue, Unique: unique}, nil
}

// checkUnique turns a job's unique member into the queue's, its period
// parsed; the queue checks the rest.
func checkUnique(b *wire.UniqueBody, field string) (*lifecycle.Unique, error) {
	if b == nil {
		return nil, nil
	}
	u := &lifecycle.Unique{Key: b.Key, States: b.States}
	if b.Period != "" {
		d, err := time.ParseDuration(b.Period)
		if err != nil {
			return nil, apiErr(codes.InvalidRequest, "%sunique.period %q is not a duration (\"1h\", \"15m\")", field, b.Period)
		}
		u.Period = d
	}
	return u, nil
}

// decodeBatch decodes and checks POST /jobs/batch's body: 1 to
// codes.MaxBatchJobs jobs, each checked as POST /jobs checks its one; a
// job at fault is named by its index.
func decodeBatch(data []byte) ([]jobqueue.NewJob, error) {
	var b wire.BatchBody
	if err := decodeStrict(data, &b, false); err != nil {
		return nil, err
	}
	if len(b.Jobs) == 0 {
		return nil, apiErr(codes.InvalidRequest, "jobs is required: 1 to %d jobs", codes.MaxBatchJobs)
	}
	if err := codes.CheckBatch("jobs", len(b.Jobs)); err != nil {
		return nil, err
	}
	out := make([]jobqueue.NewJob, len(b.Jobs))
	for i, jb := range b.Jobs {
		n, err := checkJob(jb, fmt.Sprintf("jobs[%d].", i))
		if err != nil {
			return nil, &lifecycle.BatchError{Index: i, Err: err}
		}
		out[i] = n
	}
	return out, nil
}

// decodeCallback decodes and checks POST /nlm/callback's body.
func decodeCallback(data []byte) (lifecycle.NLMCallbackBody, error) {
	var cb lifecycle.NLMCallbackBody
	if err := decodeStrict(data, &cb, false); err != nil {
		return cb, err
	}
	if err := storekey.ValidateID("job_id", cb.JobID); err != nil {
		return cb, err
	}
	return cb, nil
}

// decodeRestore decodes and checks POST /quarantine/restore's body.
func decodeRestore(data []byte) (wire.RestoreBody, error) {
	var b wire.RestoreBody
	if err := decodeStrict(data, &b, false); err != nil {
		return b, err
	}
	if b.QKey == "" {
		return b, apiErr(codes.InvalidRequest, "qkey is required")
	}
	if len(b.QKey) <= len(records.QuarantinePrefix) || b.QKey[:len(records.QuarantinePrefix)] != records.QuarantinePrefix || storekey.ValidateKey(b.QKey) != nil {
		return b, apiErr(codes.InvalidInput, "qkey is not a key under %s", records.QuarantinePrefix)
	}
	return b, nil
}
