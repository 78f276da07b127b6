// Package core is Conveyor's one execution core (docs/spec.md#recovery,
// README.md "Faults"). The
// Runner, the job Worker and the NLM processor are its users; none of them
// keeps a lease, a compare-and-swap loop, a heartbeat or a deadline of its
// own. It owns, once:
//
//   - Record: the fenced read-check-write of a typed document. The change is
//     judged against the freshest state, the write is conditional on the
//     version read, and the writer's lease (owner and epoch) is part of what
//     the write checks, inside the same loop, so an owner that lost its lease
//     gets storage.ErrLeaseLost and writes nothing.
//   - PutFenced: the same promise for an owner's other objects (step files,
//     outputs, manifests), stamped with the writer's epoch.
//   - Heartbeat: lease renewal scheduled from the last renewal, not the last
//     beat, so a process that lagged does not drift towards its lease's end.
//   - Units: user code run under a deadline. At the deadline the caller gets
//     an *OverrunError whether or not the code returns; the goroutine left
//     behind is counted and logged, its result is discarded, and shutdown
//     waits for such goroutines only as long as its context allows.
//
// Its users call the store through storage.Store.Patient, which retries
// transient failures (timeouts, 5xx, refused connections) with backoff for
// as long as the caller's context allows; only the context's end turns
// them into an error matching storage.ErrUnavailable.
//
// Poison records are not the core's to judge: Record reports one as a
// *storage.CorruptError and the engine quarantines it (storage.Quarantine).
package core
