// Package run executes agent runs on the run machines of package lifecycle:
// the [Runner] is the Orchestration Layer (docs/spec.md#platform-names), the one writer of every
// run's status.json.
//
//	r, _ := run.NewRunner(run.Config{Store: store}, run.Agent{Slug: "archivist-violin", Steps: steps})
//	go r.Run(ctx)
//	res, _ := r.Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist-violin"})
//	st, _ := r.Wait(ctx, res.RunID)
//
// The Runner runs on the SDK's one execution core, the job queue's too:
// every status write is a fenced read-check-write, step files and manifest.json
// carry the writer's epoch, and a runner that lost its lease gets
// storage.ErrLeaseLost and writes nothing; step attempts run under
// deadlines with abandoned goroutines counted ([Metrics]);
// transient store errors are waited out until the run's deadline plus
// [Config].FinishGrace; a poison status.json or slot object is quarantined
// ([lifecycle.QuarantinedError]) and never blocks the agent's
// other runs. Submits may carry an idempotency key (docs/spec.md#idempotency), and runs
// whose runner was lost are taken over from their checkpoints (docs/spec.md#recovery).
package run
