package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
)

// The names the job queue and the NLM processor share: neither engine
// imports the other, so what both speak lives here.

// DefaultProject is the cid (project id) artifacts go to when neither the
// job nor the NLM request names one and the engine's Config.Project is
// empty.
const DefaultProject = "default"

// ErrInvalidJob matches the refusal of bad input to the job queue (a
// NewJob that breaks a rule of Enqueue) and to the NLM processor (a
// request Accept refuses): nothing is written.
var ErrInvalidJob = errors.New("jobqueue: invalid job")

// BatchError is the failure of a batch of jobs (the job queue's
// EnqueueMany, the Go client's, POST /jobs/batch): job Index of the batch
// (from 0) failed with Err, which errors.Is and errors.As look through.
// Landed says which jobs landed (docs/spec.md#batch-insert): the first
// Landed of the batch were written (the caller is handed them), the rest
// were not. A batch is written in parts, in order, each all or nothing
// (500 jobs a commit on a store that commits several writes at once, one
// job elsewhere): Landed is where the failed part starts, and Index is
// the job at fault in it, or its first when the part failed as a whole
// (the store's error). When Err matches the store's outcome-unknown
// sentinel the failed part may have landed too, whole.
type BatchError struct {
	Index  int
	Landed int
	Err    error
}

// Error names the job and its failure.
func (e *BatchError) Error() string { return fmt.Sprintf("job %d of the batch: %v", e.Index, e.Err) }

// Unwrap returns the job's failure.
func (e *BatchError) Unwrap() error { return e.Err }

// JobOutput is what a job's handler produced, or the NLM processor's
// Structure stage: the content and metadata of the job's artifact, whose
// type is the job type's.
type JobOutput struct {
	Content    json.RawMessage
	EntityRefs []string
	Tags       []string
	Sources    []SourceRef
}

// SourceRef is a source an artifact cites ("sources", docs/spec.md#artifact).
type SourceRef struct {
	Ref     string `json:"ref"`
	Excerpt string `json:"excerpt,omitempty"`
}
