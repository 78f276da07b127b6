// Package jobqueue runs the job machine (docs/spec.md#job-lifecycle),
// the job machine (docs/spec.md#job-lifecycle), over the job records (lifecycle.Job) in a
// storage.Store.
//
// A job needs only a type and a payload. Register a Handler per job type
// in Config.Types (HandlerFunc, or Typed for a payload decoded into a Go
// type), run a Worker, and Insert a job; Wait returns it once COMPLETE or
// DEAD, Result reads what its handler returned and ResultAs reads it as
// its Go type (Example_quickstart). A type may set its own attempts,
// timeout and backoff (TypeConfig); Config.InsertMiddleware and
// Config.WorkMiddleware wrap every insert and every handler call. A job
// may name a run and an agent (InsertJob); an agent runs one job at a
// time, and jobs without one run in their type's lane of their queue
// ("_type." and the type, its agent_slug, in the default queue) side by
// side, as many as the Worker's Slots unless TypeConfig caps them per
// process or across processes; a named queue is paused and resumed for
// every Worker (Operator.SetPaused). InsertMany enqueues up to 10,000 jobs at once: a commit of
// each 500, all or nothing, on a store that commits several writes at
// once (docs/spec.md#batch-insert). Insert, InsertJob, InsertMany, Job,
// Result, Wait and Retry act as the system (the program that embeds the
// queue); Enqueue, EnqueueMany, Get, List and Requeue check the authority
// matrix (docs/spec.md#authority-matrix) for the actor they are given, as
// the HTTP API does for its caller.
//
// The built-in job types (RESEARCH, BRIEF, PROPOSAL_PREPROCESS) are the NLM
// pipeline's, run by Handlers (Worker.Handlers). In more detail:
//
//   - Queue: enqueue (PENDING → QUEUED after validation), claim with a lease
//     from per-agent ready lanes (queue/lanes/{agent}/, O(1) store calls per
//     job amortized) under a per-agent lock (queue/agents/{agent}.json, at
//     most one running job per agent across every worker sharing the
//     store), the pipeline CONTEXT_ASSEMBLY → NOTEBOOKLM_CALL →
//     ARTIFACT_WRITE → COMPLETE with the job type's Handler,
//     retries after 15 s, 30 s, 60 s, FAILED → DEAD, the admin's requeue,
//     orphan rescue, and an audit event for every move.
//   - Worker: the loops that claim and run jobs, waking when an agent is
//     due (a job ready, a backoff over, a lock to check) rather than on a
//     fixed poll, and sweeping one batch of jobs a minute among all the
//     workers sharing the store (SweepIfDue).
//   - The NLM backend's side (docs/spec.md#nlm-job-lifecycle) is package lifecycle/nlm.
//
// Attempt counts attempts started: pickup increments it, so with
// max_attempts 3 a job runs at most three times; each failure waits in
// RETRY_BACKOFF (15 s after the first, 30 s after the second, 60 s after
// the third, or the type's Backoff) and the end of that wait sends it back to QUEUED while
// attempt < max_attempts, else to FAILED and at once to DEAD.
//
// Every job write is one compare-and-swap with the job machine fired inside
// the mutation; a worker's writes are fenced by its lease (owner, epoch,
// expiry), so a worker whose lease lapsed and was taken over cannot write.
// ARTIFACT_WRITE creates the job's one artifact (its id derived from the
// job id, create-only, finalized in that write) and the job points at it
// only in the write that makes it COMPLETE (invariant F3).
package jobqueue
