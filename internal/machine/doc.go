// Package machine holds Conveyor's declarative state machines over the
// records of the types package (lifecycle).
//
// A [Machine] is data: its states, initial state, terminal set and a table of
// [Transition] values {From, To, Event, Actors, Guard}. The same table drives
// validation ([Machine.Check]), event firing through
// github.com/qmuntal/stateless ([Machine.Fire]), the typed errors
// (lifecycle.InvalidTransitionError, lifecycle.ForbiddenActorError), and the
// Mermaid, DOT and JSON exports ([Machine.Spec], [Mermaid], [DOT]).
//
// The package defines the run machines of the specs ([CanonicalRun],
// [CancelableRun], [ApprovalRun]) and the run-step machine ([RunStep]) over
// any [Stateful] record, and beside them the job ([JobMachine]), NLM-job
// ([NLMMachine]) and inbox-entry ([InboxMachine]) machines, all built with
// [New], and the events that fire them.
package machine
