// Package nlm is the NLM backend's side (docs/spec.md#nlm-job-lifecycle), on Conveyor's one
// execution core: the Processor that runs the NLM-job machine
// (the NLM-job machine: ACCEPTED → FETCHING_CONTEXT → BUILDING_PROMPT →
// NLM_QUERY → STRUCTURING → CALLBACK → DONE, any non-terminal state →
// ERROR) over its record (lifecycle.NLMJob, nlm/jobs/{job_id}.json), and the
// wiring that lets a run wait for it.
//
// The Processor holds a lease (owner, epoch, expiry) in each job it works
// on, renewed by heartbeat; every write it makes is a read-check-write
// fenced by that lease, so a processor paused past its lease cannot write
// once another took the job over (storage.ErrLeaseLost). Each stage's code
// runs under its own deadline (Config.FetchTimeout … CallbackTimeout): at
// the deadline the job goes to ERROR and the FAILED callback is sent, even
// if the code ignores its context (its goroutine is left behind and
// logged). A job whose processor was lost is taken over by
// another after its lease lapses, with epoch+1, and resumed: the stages
// before the one it was in run again (their results are not stored), a job
// in CALLBACK only posts its callback again; after Config.MaxTakeovers
// takeovers the job goes to ERROR instead. Records that cannot be decoded
// or fail validation are quarantined and never block other jobs. The store
// is waited out through transient failures.
//
// A run step asks the NLM backend with Ask: its first step enqueues the
// job and parks the run in waiting_external (approval run machine); the
// NLM backend's callback, posted to Sink, resumes the run through
// Runner.Deliver; the second step's output is the job's Result.
//
//	p, _ := nlm.New(nlm.Config{Store: store, CallbackURL: "https://conveyor.internal/nlm/callback"}, stages)
//	runner, _ := run.NewRunner(cfg, run.Agent{Slug: "researcher", Machine: lifecycle.MachineApproval,
//		Steps: nlm.Ask(p, "brief", func(ctx context.Context, in run.StepInput) (lifecycle.NLMRequest, error) {
//			return lifecycle.NLMRequest{JobType: lifecycle.JobBrief, Query: string(in.Input)}, nil
//		})})
//	http.Handle("POST /nlm/callback", nlm.Sink(runner, p))
//	go p.Run(ctx)
//	go runner.Run(ctx)
package nlm
