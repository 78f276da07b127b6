// Package records is what Conveyor persists on a storage.Store besides the
// lifecycle records of docs/spec.md#records: typed JSON documents with their
// write counter (Read, Create, over lifecycle.Meta) and the members of a
// newer release they carry through a rewrite (Keep, Encode), the lease helpers, the
// audit log, and the quarantine of records that cannot be decoded. The
// types a caller matches on (lifecycle.Lease, lifecycle.QuarantinedError,
// lifecycle.LeaseLostError, lifecycle.AuditEvent) are in the types package.
//
// It sits on the storage contract and below the machines; see
// docs/design.md#layers-and-packages for the layers.
package records
