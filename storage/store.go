// Package storage is the Store every state change in Conveyor goes
// through: Get, Put and Delete with conditions, List and Watch by prefix,
// versions, ids and keys, and the errors every adapter reports the same
// way. What is stored on it is the SDK's records (documents, audit,
// quarantine, leases), at the keys of docs/spec.md#key-layout.
//
// A Store is a flat map from keys to byte values with conditional writes.
// Its promises (read-after-write, create-once, compare-and-swap linearizable
// per key) are what make the single status writer, lease fencing and
// create-once artifacts true.
//
// Store is one concrete type, the portable layer over a driver: an adapter
// (memstore, filestore, s3store) implements the narrow interface of package
// storage/driver, and New builds the Store over it, which checks every
// argument, wraps every failure in an *OpError, lists through the driver's
// ListAfter and finds its optional capabilities (Watch, settle time) once
// for all adapters. Every driver is proven against the same conformance
// suite, package storage/storetest.
package storage

import "github.com/runconveyor/conveyor/storage/driver"

// Version identifies the state one write left at one key; see
// driver.Version for what adapters guarantee of it.
type Version = driver.Version

// Condition is the precondition of a Put or Delete (driver.Condition). The
// zero value is unconditional. Build others with IfNotExists and IfMatch.
type Condition = driver.Condition

// IfNotExists makes a Put create-only: it fails with ErrPreconditionFailed
// when the key already exists.
func IfNotExists() Condition { return driver.IfNotExists() }

// IfMatch makes a Put or Delete succeed only while the key's current version
// is v. A missing key fails the condition (ErrPreconditionFailed), never
// ErrNotFound, so a compare-and-swap loop has one error to handle.
func IfMatch(v Version) Condition { return driver.IfMatch(v) }
