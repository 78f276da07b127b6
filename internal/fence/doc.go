// Package fence is how every engine (the Runner, the job Worker, the NLM
// processor, the inbox, artifacts, schedules, the janitor) writes its
// records (docs/spec.md#recovery, README.md "Faults"); none of them keeps a
// lease, a compare-and-swap loop or a heartbeat of its own. It owns, once:
//
//   - Record: the fenced read-check-write of a typed document. The change is
//     judged against the freshest state, the write is conditional on the
//     version read, and the writer's lease (owner and epoch) is part of what
//     the write checks, inside the same loop, so an owner that lost its lease
//     gets lifecycle.ErrLeaseLost and writes nothing.
//   - Put: the same promise for an owner's other objects (step files,
//     outputs, manifests), stamped with the writer's epoch.
//   - Heartbeat: lease renewal scheduled from the last renewal, not the last
//     beat, so a process that lagged does not drift towards its lease's end;
//     LeaseCertain: when the clock alone still vouches for a lease.
//
// Its users call the store through storage.Store.Patient, which retries
// transient failures (timeouts, 5xx, refused connections) with backoff for
// as long as the caller's context allows; only the context's end turns
// them into an error matching storage.ErrUnavailable.
//
// Poison records are not fence's to judge: Record (and Decode) reports one
// as a *lifecycle.QuarantinedError and the engine quarantines it (package
// quarantine).
package fence
