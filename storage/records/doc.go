// Package records is what Conveyor persists on a storage.Store besides the
// lifecycle records of docs/spec.md#records: typed JSON documents with their write counter (Meta,
// Read, Create), the lease a writer holds in a record, the audit log, and
// the quarantine of records that cannot be decoded.
//
// It sits on the storage contract and below the machines; see
// docs/design.md#layers-and-packages for the layers.
package records
