// Package maintenance is the one form of Conveyor's maintenance services:
// the job queue's sweep, the Runner's index repair and backfill, the
// retention janitor, the inbox expiry. Each is one type, in one file of
// the package whose records it repairs or deletes, embedding Base (its
// name, clock, logger and period) and with RunOnce, one pass. Run and
// Start drive any of them alike, on the clock a test fakes; Ticker drives
// one from its host's loop instead (the index repair, from the Runner's
// poll, so that an idle Runner waits on one timer).
//
// A service whose pass must be made once per period across the processes
// sharing a store (the sweep, the janitor) takes its turn with Turn: a
// lease in a record written through fence.Record, the same fenced
// read-check-write the engines' own leases use, so a process that lost
// the turn writes nothing more there.
package maintenance
