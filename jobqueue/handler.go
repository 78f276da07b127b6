package jobqueue

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Handler does the work of a job type's jobs (Config.Types). The queue
// calls Work once per attempt, inside Config.WorkMiddleware, under the
// type's Timeout (Config.StepTimeout by default), and stores the
// lifecycle.JobOutput it returns as the job's artifact in the write that makes the job
// COMPLETE. An error sends the job to RETRY_BACKOFF (retried after the
// type's Backoff, Config.Backoff by default, while attempts are left); wrap it with Permanent when no
// retry can mend it, or return a *StatusError to record an HTTP status.
//
// Handlers, the NLM pipeline's two steps, is a Handler too; Typed makes one
// of a function of the job's decoded payload.
type Handler interface {
	Work(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error)
}

// HandlerFunc is a function that is a Handler.
type HandlerFunc func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error)

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
	return f(ctx, job)
}

// Work runs the NLM pipeline's steps in one call: AssembleContext (if
// set), then CallNotebookLM. The queue itself does not call it: it runs
// the two steps as CONTEXT_ASSEMBLY and NOTEBOOKLM_CALL, each under
// Config.StepTimeout, recording the move between them.
func (h Handlers) Work(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
	if h.CallNotebookLM == nil {
		return lifecycle.JobOutput{}, Permanent(errNoCall)
	}
	var snapshot json.RawMessage
	if h.AssembleContext != nil {
		var err error
		if snapshot, err = h.AssembleContext(ctx, job); err != nil {
			return lifecycle.JobOutput{}, err
		}
	}
	return h.CallNotebookLM(ctx, job, snapshot)
}

// Typed makes a Handler of fn, a function of the job's payload decoded
// from JSON into Args, whose result, encoded as JSON, is the content of
// the job's artifact. A payload that does not decode into Args fails the
// job at once (Permanent) with an error naming the job, Args and the
// decoding error; so does a result that does not encode. An empty payload
// decodes as JSON null: Args stays its zero value. The decoding is
// encoding/json's: fields of the payload that Args lacks are ignored.
func Typed[Args, Result any](fn func(ctx context.Context, args Args) (Result, error)) Handler {
	return HandlerFunc(func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
		var args Args
		if len(job.Payload) > 0 {
			if err := json.Unmarshal(job.Payload, &args); err != nil {
				return lifecycle.JobOutput{}, Permanent(&payloadError{JobID: job.JobID, JobType: job.JobType, Type: fmt.Sprintf("%T", args), Err: err})
			}
		}
		res, err := fn(ctx, args)
		if err != nil {
			return lifecycle.JobOutput{}, err
		}
		content, err := json.Marshal(res)
		if err != nil {
			return lifecycle.JobOutput{}, Permanent(fmt.Errorf("jobqueue: encoding the result of job %s as JSON: %w", job.JobID, err))
		}
		return lifecycle.JobOutput{Content: content}, nil
	})
}

// payloadError is the failure of a Typed handler whose job's payload does
// not decode into its Args. The job goes to DEAD with error_code
// PERMANENT and this error's text.
type payloadError struct {
	JobID   string
	JobType lifecycle.JobType
	Type    string // Args, as %T prints it
	Err     error  // encoding/json's error
}

// Error names the job, its type, Args and the decoding error.
func (e *payloadError) Error() string {
	return fmt.Sprintf("jobqueue: payload of job %s (%s) does not decode into %s: %v", e.JobID, e.JobType, e.Type, e.Err)
}

// Unwrap returns the decoding error.
func (e *payloadError) Unwrap() error { return e.Err }

// errNoCall: Handlers without CallNotebookLM were asked to work.
var errNoCall = fmt.Errorf("jobqueue: Handlers.CallNotebookLM is nil")

// handlerFor is the Handler that runs a job of type t: the type's own
// (Config.Types), else given (the Worker's, or the one passed to
// Claim.Run); nil when neither can run it.
func (q *runner) handlerFor(t lifecycle.JobType, given Handler) Handler {
	if tc, ok := q.types[t]; ok && usable(tc.Handler) {
		return tc.Handler
	}
	if usable(given) {
		return given
	}
	return nil
}

// usable tells whether h can run a job: not nil, and not Handlers without
// CallNotebookLM (a zero Handlers stands for "none").
func usable(h Handler) bool {
	switch h := h.(type) {
	case nil:
		return false
	case Handlers:
		return h.CallNotebookLM != nil
	case *Handlers:
		return h != nil && h.CallNotebookLM != nil
	case HandlerFunc:
		return h != nil
	}
	return true
}

// nlmSteps returns the NLM pipeline's steps when h is Handlers, which
// the queue runs as two states (CONTEXT_ASSEMBLY, NOTEBOOKLM_CALL).
func nlmSteps(h Handler) (Handlers, bool) {
	switch h := h.(type) {
	case Handlers:
		return h, true
	case *Handlers:
		return *h, true
	}
	return Handlers{}, false
}

// assembles tells whether h has a CONTEXT_ASSEMBLY step.
func assembles(h Handler) bool {
	s, ok := nlmSteps(h)
	return ok && s.AssembleContext != nil
}
