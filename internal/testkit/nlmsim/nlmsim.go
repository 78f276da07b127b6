// Package nlmsim is an NLM backend simulator: NotebookLM's answer after a
// pause, in the artifact schema of the job's type, with nothing leaving the
// machine. The Worker's demo (examples/worker) runs on it, so that every
// endpoint and the live page have something to show on a fresh machine.
package nlmsim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/activity"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
)

// Stages are the NLM processor's pipeline: the answer to a request after
// pause on clk, as the artifact of its job type.
func Stages(clk clock.Clock, pause time.Duration) nlm.Stages {
	return nlm.Stages{
		Query: func(ctx context.Context, req lifecycle.NLMRequest, prompt string) (json.RawMessage, error) {
			if err := activity.Sleep(ctx, clk, pause); err != nil {
				return nil, err
			}
			return content(req.JobType, req.Query)
		},
	}
}

// Handlers run the job queue's built-in job types: NotebookLM's call
// answers after pause on clk.
func Handlers(clk clock.Clock, pause time.Duration) jobqueue.Handlers {
	return jobqueue.Handlers{
		CallNotebookLM: func(ctx context.Context, job lifecycle.Job, _ json.RawMessage) (lifecycle.JobOutput, error) {
			if err := activity.Sleep(ctx, clk, pause); err != nil {
				return lifecycle.JobOutput{}, err
			}
			b, err := content(job.JobType, fmt.Sprintf("job %s of %s", job.JobID, job.AgentSlug))
			if err != nil {
				return lifecycle.JobOutput{}, err
			}
			return lifecycle.JobOutput{Content: b}, nil
		},
	}
}

// content is a simulated NotebookLM answer in the artifact schema of the
// job's type (docs/spec.md#artifact).
func content(t lifecycle.JobType, query string) (json.RawMessage, error) {
	answer := "Simulated answer to: " + query
	switch t {
	case lifecycle.JobResearch:
		return json.Marshal(map[string]any{"title": "Research brief", "summary": answer,
			"sections": []map[string]string{{"heading": "Findings", "body": "The demo NLM backend answered; nothing left this machine."}}})
	case lifecycle.JobProposalPreprocess:
		return json.Marshal(map[string]any{"original": json.RawMessage(`{}`), "enriched": json.RawMessage(`{}`)})
	default:
		return json.Marshal(map[string]any{"title": "Brief", "body": answer, "word_count": len(strings.Fields(answer))})
	}
}

// Poster posts the callbacks as the nlm-backend actor, the only one the
// HTTP API lets post them: with that actor's first token of tokens (the
// API's), else naming it in the header an API without tokens reads.
func Poster(tokens map[string]lifecycle.Actor) nlm.Poster {
	var p poster
	for t, a := range tokens {
		if a == lifecycle.ActorNLMBackend && (p.token == "" || t < p.token) {
			p.token = t
		}
	}
	return p
}

// actorHeader names the actor of a request to an API without tokens
// (docs/http-api.md).
const actorHeader = "X-Conveyor-Actor"

type poster struct{ token string }

func (p poster) Do(req *http.Request) (*http.Response, error) {
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	} else {
		req.Header.Set(actorHeader, string(lifecycle.ActorNLMBackend))
	}
	return http.DefaultClient.Do(req)
}
