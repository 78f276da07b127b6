// Package lifecycle holds Conveyor's declarative state machines.
//
// A [Machine] is data: its states, initial state, terminal set and a table of
// [Transition] values {From, To, Event, Actors, Guard}. The same table drives
// validation ([Machine.Check]), event firing through
// github.com/qmuntal/stateless ([Machine.Fire]), the typed errors, and the
// Mermaid, DOT and JSON exports ([Spec]).
//
// The package defines the run machines of the specs ([CanonicalRun],
// [CancelableRun], [ApprovalRun]) and the run-step machine ([RunStep]); the job
// and NLM-job machines live in package jobqueue and the inbox machine in
// package inbox, all built with [New].
//
// The [Runner] executes runs on those machines over a storage.Store, on the
// SDK's one execution core (internal/core): every status write is a fenced
// read-check-write, step files and manifest.json carry the writer's epoch,
// and a runner that lost its lease gets [ErrLeaseLost] and writes nothing;
// step attempts run under deadlines with abandoned goroutines counted
// ([Runner.Stragglers]); transient store errors are waited out until the
// run's deadline plus [Config].FinishGrace; a poison status.json or slot
// object is quarantined ([RunQuarantinedError], [Runner.Quarantined]) and
// never blocks the agent's other runs.
package lifecycle
