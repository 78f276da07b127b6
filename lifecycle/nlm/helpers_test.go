package nlm_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
)

var t0 = time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)

const briefContent = `{"title":"Brief","body":"Short text","entity_map":{"violin":"Violin"},"word_count":2}`

var quiet = slog.New(slog.DiscardHandler)

// stagesFailingAt returns stages that succeed, except the one named failAt
// ("fetch", "prompt", "query", "structure"), which answers 503; "content"
// makes Structure return content the artifact schema refuses.
func stagesFailingAt(failAt string) nlm.Stages {
	boom := func(step string) error {
		if step == failAt {
			return &jobqueue.StatusError{Code: 503, Err: errors.New(step + " down")}
		}
		return nil
	}
	return nlm.Stages{
		FetchContext: func(ctx context.Context, req lifecycle.NLMRequest) (json.RawMessage, error) {
			return json.RawMessage(`{"notes":["a"]}`), boom("fetch")
		},
		BuildPrompt: func(ctx context.Context, req lifecycle.NLMRequest, snap json.RawMessage) (string, error) {
			return req.Query + string(snap), boom("prompt")
		},
		Query: func(ctx context.Context, req lifecycle.NLMRequest, prompt string) (json.RawMessage, error) {
			return json.RawMessage(`{"text":"answer"}`), boom("query")
		},
		Structure: func(ctx context.Context, req lifecycle.NLMRequest, answer json.RawMessage) (lifecycle.JobOutput, error) {
			if failAt == "content" {
				return lifecycle.JobOutput{Content: json.RawMessage(`{"title":""}`)}, nil
			}
			return lifecycle.JobOutput{Content: json.RawMessage(briefContent)}, boom("structure")
		},
	}
}

func request(callback, id string) lifecycle.NLMRequest {
	return lifecycle.NLMRequest{JobID: id, RunID: "run-1", JobType: lifecycle.JobBrief, AgentSlug: "agent",
		Query: "q", Callback: callback}
}

func newProcessor(t testing.TB, cfg nlm.Config, stages nlm.Stages) *nlm.Processor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	p, err := nlm.New(cfg, stages)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
