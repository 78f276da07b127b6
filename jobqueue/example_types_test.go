package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
)

// A job type of your own beside the built-in NLM types: its Handler, and a
// check of its artifact's content. Permanent says "don't retry".
func ExampleTypeConfig() {
	ctx := context.Background()
	summarize := jobqueue.TypeConfig{
		Handler: jobqueue.HandlerFunc(func(ctx context.Context, job lifecycle.Job) (lifecycle.JobOutput, error) {
			var in struct{ URL string }
			if err := json.Unmarshal(job.Payload, &in); err != nil || in.URL == "" {
				return lifecycle.JobOutput{}, jobqueue.Permanent(errors.New("payload needs a url"))
			}
			return lifecycle.JobOutput{Content: json.RawMessage(`{"summary":"three lines about ` + in.URL + `"}`)}, nil
		}),
		Validate: func(content json.RawMessage) error {
			var c struct{ Summary string }
			if json.Unmarshal(content, &c) != nil || c.Summary == "" {
				return errors.New("summary missing")
			}
			return nil
		},
	}
	q, _ := jobqueue.New(jobqueue.Config{
		Store: memstore.New(),
		Types: map[lifecycle.JobType]jobqueue.TypeConfig{"SUMMARY": summarize},
	})
	for _, payload := range []string{`{"url":"https://example.com"}`, `{}`} {
		job, _ := q.Enqueue(ctx, lifecycle.ActorGateway, jobqueue.NewJob{
			RunID: "run-1", JobType: "SUMMARY", AgentSlug: "summarizer", Payload: json.RawMessage(payload),
		})
		c, _ := q.Claim(ctx, "worker-1")
		done, _ := c.Run(ctx, nil) // the type brings its own
		fmt.Println(done.Status, "after", done.Attempt, "attempt(s)", "code="+done.ErrorCode)
		if done.Status == lifecycle.JobComplete {
			art, _ := q.Artifacts().GetForJob(ctx, lifecycle.ActorAdmin, lifecycle.DefaultProject, job.JobID)
			fmt.Println(art.Type, string(art.Content))
		}
	}
	// Output:
	// COMPLETE after 1 attempt(s) code=
	// SUMMARY {"summary":"three lines about https://example.com"}
	// DEAD after 1 attempt(s) code=PERMANENT
}
