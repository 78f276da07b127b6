// Package lifecycle is Conveyor's types package: the records the SDK
// stores and hands back (a run's status and steps, a job, an NLM job, an
// inbox entry, and what they embed: the lease, the document version, the
// audit event), the states of their lifecycles, the bodies the HTTP API
// and its Go client exchange, and the errors a caller matches on: the
// category sentinels (ErrNotFound, ErrInvalidInput, ErrLeaseLost,
// ErrCorrupt, ...), the typed errors that carry the details
// ([InvalidTransitionError], [InputError], [QuarantinedError],
// [LeaseLostError], [RunError]), and [ErrorCode], which gives any error of
// the SDK its code (docs/spec.md#error-codes).
//
// It imports nothing but the standard library, so every part of the SDK,
// the Go client included, shares one copy of these types. The engines that
// move the records live beside it: run orchestration in the subpackage run,
// the NLM processor in nlm, the job queue in package jobqueue; the fake
// clock for tests of your own code is in the subpackage clock.
package lifecycle
