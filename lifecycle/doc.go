// Package lifecycle holds Conveyor's declarative state machines.
//
// A [Machine] is data: its states, initial state, terminal set and a table of
// [Transition] values {From, To, Event, Actors, Guard}. The same table drives
// validation ([Machine.Check]), event firing through
// github.com/qmuntal/stateless ([Machine.Fire]), the typed errors, and the
// Mermaid, DOT and JSON exports ([Spec]).
//
// The package defines the run machines of the specs ([CanonicalRun],
// [CancelableRun], [ApprovalRun]) and the run-step machine ([RunStep]) over
// any [Stateful] record, and beside them the job ([JobMachine]), NLM-job
// ([NLMMachine]) and inbox-entry ([InboxMachine]) machines with the records
// they move ([Job], [NLMJob], [InboxEntry]), all built with [New].
//
// The package also holds the actors, and [ErrorCode], which gives any error
// of the SDK its code; the code table itself, with the HTTP statuses and the
// input limits, is the leaf package lifecycle/codes.
//
// Run orchestration (the Runner, run records, idempotency, recovery) is in
// the subpackage run; the fake clock for tests of your own code is in the
// subpackage clock.
package lifecycle
