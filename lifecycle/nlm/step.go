package nlm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/machine"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// Result is the output (StepOutput.Data, the step file's "output") of the
// second step Ask returns: the NLM job and its artifact's content.
type Result struct {
	JobID      string          `json:"job_id"`
	ArtifactID string          `json:"artifact_id"`
	Content    json.RawMessage `json:"content"`
}

// asked is the output of Ask's first step: the job it enqueued.
type asked struct {
	JobID string `json:"job_id"`
}

// eventType is the external event a run parked by Ask waits for. It names
// the job, so a callback of another job can never resume the wait.
func eventType(jobID string) string { return "nlm_result:" + jobID }

// jobIDFor is the job id of the step at position step of run runID: the
// same on every attempt and after a resume, so Accept's idempotence makes
// a step run twice enqueue one job.
func jobIDFor(runID string, step int) string {
	sum := sha256.Sum256([]byte(runID + "/" + strconv.Itoa(step)))
	return "nlm-" + hex.EncodeToString(sum[:16])
}

// Ask returns two steps of an agent on the approval run machine
// (lifecycle.MachineApproval) that ask the NLM backend and wait for its
// answer without holding a slot:
//
//   - name builds a Request from its StepInput with build, accepts it on b
//     (enqueuing the NLM job) and parks the run in waiting_external for the
//     job's callback. Left empty, the request's JobID is derived from the
//     run id and the step's position (the same on every attempt, so a step
//     run again enqueues no second job), RunID and AgentSlug are the run's
//     and Callback is the backend's default (a Processor's
//     Config.CallbackURL), where Sink must be served.
//   - name+"-result" runs once Sink has resumed the run: its output is the
//     job's Result, or it fails the run with NLM_UNAVAILABLE (not retried)
//     when the job ended in ERROR.
//
// Both are idempotent and resumable. Put them next to each other, in this
// order, in the agent's steps. The wait is bounded by the runner's
// ExternalTimeout.
func Ask(b Backend, name string, build func(ctx context.Context, in run.StepInput) (lifecycle.NLMRequest, error)) []run.Step {
	ask := func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		req, err := build(ctx, in)
		if err != nil {
			return run.StepOutput{}, err
		}
		if req.JobID == "" {
			req.JobID = jobIDFor(in.RunID, in.Step)
		}
		if req.RunID == "" {
			req.RunID = in.RunID
		}
		if req.AgentSlug == "" {
			req.AgentSlug = in.AgentSlug
		}
		if req.RunID != in.RunID {
			return run.StepOutput{}, &lifecycle.RunError{Code: codes.InvalidInput, Permanent: true,
				Message: fmt.Sprintf("NLM request names run %q, not this run", req.RunID)}
		}
		job, err := b.Accept(ctx, req)
		if errors.Is(err, lifecycle.ErrInvalidJob) {
			return run.StepOutput{}, &lifecycle.RunError{Code: codes.InvalidInput, Message: err.Error(), Permanent: true, Err: err}
		}
		if err != nil {
			return run.StepOutput{}, err
		}
		data, _ := json.Marshal(asked{JobID: job.JobID})
		return run.StepOutput{Summary: "NLM job " + job.JobID + " accepted", Data: data,
			Await: &run.Await{ExternalEvent: eventType(job.JobID)}}, nil
	}
	result := func(ctx context.Context, in run.StepInput) (run.StepOutput, error) {
		var a asked
		if in.Step < 2 || len(in.Previous) < in.Step-1 || json.Unmarshal(in.Previous[in.Step-2], &a) != nil || a.JobID == "" {
			return run.StepOutput{}, &lifecycle.RunError{Code: codes.InternalError, Permanent: true,
				Message: fmt.Sprintf("step %s-result must follow step %s", name, name)}
		}
		job, err := b.Get(ctx, a.JobID)
		switch {
		case err != nil:
			return run.StepOutput{}, err
		case job.Status == lifecycle.NLMError:
			return run.StepOutput{}, &lifecycle.RunError{Code: codes.NLMUnavailable, Permanent: true,
				Message: fmt.Sprintf("NLM job %s failed: %s", job.JobID, job.Error)}
		case job.ArtifactID == "":
			return run.StepOutput{}, lifecycle.NewRunError(codes.NLMUnavailable, "NLM job %s has no result yet (%s)", job.JobID, job.Status)
		}
		project := ""
		if job.Request != nil {
			project = job.Request.ProjectID
		}
		art, err := b.Artifact(ctx, project, job.ArtifactID)
		if err != nil {
			return run.StepOutput{}, err
		}
		data, err := json.Marshal(Result{JobID: job.JobID, ArtifactID: art.ArtifactID, Content: art.Content})
		if err != nil {
			return run.StepOutput{}, err
		}
		return run.StepOutput{Summary: "NLM artifact " + art.ArtifactID, Data: data}, nil
	}
	return []run.Step{
		{Name: name, Run: ask, Idempotent: true, Resumable: true},
		{Name: name + "-result", Run: result, Idempotent: true, Resumable: true},
	}
}

// Sink is the http.Handler the NLM backend's callbacks are posted to
// (Config.CallbackURL). It checks the body against the job's record, and
// resumes the job's run with r.Deliver (as the gateway, the webhook's
// actor) once the run is parked waiting for that job; a callback that
// arrives while the run's step is still parking it waits for the park
// (Runner.Wait, bounded by the request's context). It answers 204 when the
// run was resumed, or needs no resuming (resumed already, moved on, or the
// job has no run); 400 for a bad body, 404 for an unknown job, 409 when the
// body contradicts the job's record, 503 when the store or the runner
// failed (the processor tries again).
func Sink(r *run.Runner, b Backend) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		status, msg := sink(req.Context(), r, b, req)
		if status == http.StatusNoContent {
			w.WriteHeader(status)
			return
		}
		http.Error(w, msg, status)
	})
}

func sink(ctx context.Context, r *run.Runner, b Backend, req *http.Request) (int, string) {
	job, status, msg := callbackJob(ctx, b, req)
	if status != 0 {
		return status, msg
	}
	return resumeRun(ctx, r, job)
}

// callbackJob reads the callback and the NLM job it is about; a status
// other than 0 refuses it.
func callbackJob(ctx context.Context, b Backend, req *http.Request) (lifecycle.NLMJob, int, string) {
	if req.Method != http.MethodPost {
		return lifecycle.NLMJob{}, http.StatusMethodNotAllowed, "POST only"
	}
	var cb lifecycle.NLMCallbackBody
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&cb); err != nil {
		return lifecycle.NLMJob{}, http.StatusBadRequest, "bad callback body: " + err.Error()
	}
	if err := storekey.ValidateID("job id", cb.JobID); err != nil {
		return lifecycle.NLMJob{}, http.StatusBadRequest, err.Error()
	}
	job, err := b.Get(ctx, cb.JobID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return lifecycle.NLMJob{}, http.StatusNotFound, "no NLM job " + cb.JobID
	case err != nil:
		return lifecycle.NLMJob{}, http.StatusServiceUnavailable, err.Error()
	}
	ok := (cb.Status == callbackComplete && cb.ArtifactID != "" && cb.ArtifactID == job.ArtifactID && (job.Status == lifecycle.NLMCallback || job.Status == lifecycle.NLMDone)) ||
		(cb.Status == callbackFailed && job.Status == lifecycle.NLMError)
	if !ok {
		return job, http.StatusConflict, fmt.Sprintf("callback %s does not match NLM job %s in %s", cb.Status, job.JobID, job.Status)
	}
	return job, 0, ""
}

// resumeRun delivers the job's event to the run that waits for it, once
// the run has parked.
func resumeRun(ctx context.Context, r *run.Runner, job lifecycle.NLMJob) (int, string) {
	runID := job.Request.RunID
	if runID == "" {
		return http.StatusNoContent, ""
	}
	want := eventType(job.JobID)
	st, err := r.Status(ctx, runID)
	for waited := false; ; waited = true {
		switch {
		case err != nil:
			return http.StatusServiceUnavailable, err.Error()
		case st.External != nil && st.External.EventType == want && st.External.EventID != "":
			return http.StatusNoContent, "" // delivered before
		case st.Status == string(machine.ApprovalWaitingExternal) && st.External != nil && st.External.EventType == want:
			_, err := r.Deliver(ctx, runID, lifecycle.ActorGateway, run.ExternalEvent{Type: want, ID: job.JobID, Source: string(lifecycle.ActorNLMBackend)})
			if err != nil && !errors.Is(err, lifecycle.ErrInvalidTransition) {
				return http.StatusServiceUnavailable, err.Error()
			}
			return http.StatusNoContent, "" // an invalid transition: a duplicate delivered it meanwhile
		case waited || (st.Status != string(machine.ApprovalPending) && st.Status != string(machine.ApprovalRunning)):
			return http.StatusNoContent, "" // the run is past this job's wait
		}
		// Its step is still running: wait until the run parks.
		st, err = r.Wait(ctx, runID)
	}
}
