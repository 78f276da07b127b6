// Package retention is the janitor that deletes finished history past a
// retention age: finished runs (the whole run folder and its index
// entries), audit days, finished jobs, idempotency records past their
// expires_at, expired inbox entries and, when asked, DEAD jobs and
// finalized artifacts (docs/retention.md).
//
// Retention is off by default (Config.Age 0): nothing is ever deleted
// unless a Config says so. Every process sharing a store may run a
// Janitor; a pass is due every Config.Interval and one janitor makes it,
// holding a lease record taken through the execution core, page by page
// from a cursor it records, so a janitor that dies mid-pass is followed
// by another from where it stopped. Every delete is conditional on the
// version the janitor judged, so a record changed since is kept. Each pass
// logs one retention_pass line and reports to Config.Metrics.
//
// S3Lifecycle prints the bucket lifecycle configuration that does the
// same by age alone, the alternative for buckets (docs/retention.md says
// what it cannot tell apart).
package retention
