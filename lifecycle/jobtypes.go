package lifecycle

import (
	"encoding/json"
	"errors"
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
