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
// any [Stateful] record; the job and NLM-job machines live in package
// jobqueue and the inbox machine in package inbox, all built with [New].
//
// The package also holds what every other package of the SDK shares: the
// actors, the error codes with their HTTP statuses ([ErrorCode],
// [HTTPStatus]) and the one input check of free text ([CheckText],
// [CheckBytes]) with its limits.
//
// Run orchestration (the Runner, run records, idempotency, recovery) is in
// the subpackage run; the fake clock for tests of your own code is in the
// subpackage clock.
package lifecycle
