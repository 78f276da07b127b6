package storetest

import (
	"testing"

	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// Harness gives the suite the driver under test (package storage/driver),
// one fresh and empty namespace per check, in the manner of gocloud.dev's
// blob/drivertest: an adapter's own tests make a new driver each time (a
// memstore, a temporary directory), and a harness on a store that already
// runs hands out a new key prefix of one bucket or a new directory of one
// disk. The suite checks the driver through the portable storage.Store
// that storage.New builds over it, as every caller uses it; what that
// layer adds alone (key and condition checks, error wrapping, List from
// ListAfter, the Watch fallback) is checked once, by package storage's own
// tests.
type Harness interface {
	// NewDriver returns an empty namespace of the driver for one check, t.
	// It fails or skips t itself when it cannot, and removes what the
	// check wrote with t.Cleanup, which runs whatever the check's outcome.
	NewDriver(t *testing.T) driver.Store
	// Capabilities declares what the store guarantees where the
	// storage.Store contract lets stores differ; the suite checks that.
	Capabilities() Capabilities
}

// Capabilities are the differences the storage.Store contract allows
// between stores. The zero value is the strictest store: unique versions
// for every write, atomic conditional deletes (memstore, filestore).
type Capabilities struct {
	// ContentVersions: versions are derived from the stored bytes (S3's
	// ETag is the MD5 of the body), so rewriting bytes a key held before
	// may bring back that earlier version (see storage.Version). The suite
	// then checks what such a store does guarantee: versions of different
	// bytes differ, and IfMatch(v) succeeds exactly when v is current.
	ContentVersions bool
	// NonAtomicConditionalDelete: an IfMatch Delete checks the version and
	// then deletes, so a write landing in between is deleted too (s3store
	// on MinIO, see storage.Store's Delete). The suite then checks the
	// condition against one writer at a time only; without it, a
	// conditional Delete racing a compare-and-swap of the same version
	// must lose or win alone.
	NonAtomicConditionalDelete bool
}

// TestDriver runs the whole conformance suite against the drivers
// newDriver makes, with the capabilities caps declares: Run with a Harness
// built of the two. The suite calls newDriver once per check; an adapter
// may hand out views of one backend (a fresh key prefix or bucket each
// time) and register cleanup with t.Cleanup.
func TestDriver(t *testing.T, newDriver func(t *testing.T) driver.Store, caps Capabilities) {
	Run(t, funcHarness{newDriver, caps})
}

type funcHarness struct {
	newDriver func(t *testing.T) driver.Store
	caps      Capabilities
}

func (h funcHarness) NewDriver(t *testing.T) driver.Store { return h.newDriver(t) }
func (h funcHarness) Capabilities() Capabilities          { return h.caps }

// Check is one check of the suite: its subtest's name and what it runs.
type check struct {
	name string
	fn   func(*testing.T, *storage.Store)
}

// checks is the suite, for a store with capabilities c.
func checks(c Capabilities) []check {
	return []check{
		{"GetMissing", testGetMissing},
		{"ReadAfterWrite", testReadAfterWrite},
		{"EmptyValue", testEmptyValue},
		{"ValuesAreCopied", testValuesAreCopied},
		{"IdenticalBodiesGetNewVersions", func(t *testing.T, s *storage.Store) { testIdenticalBodies(t, s, c) }},
		{"PutConditions", testPutConditions},
		{"DeleteConditions", testDeleteConditions},
		{"ConditionalDeleteIsAtomic", func(t *testing.T, s *storage.Store) { testConditionalDeleteAtomic(t, s, c) }},
		{"RecreateAfterDelete", func(t *testing.T, s *storage.Store) { testRecreateAfterDelete(t, s, c) }},
		{"CreateOnceRace", testCreateOnceRace},
		{"CASCounterRace", testCASCounterRace},
		{"Linearizable", testLinearizable},
		{"ListOrderAndPrefixes", testListOrder},
		{"ListStopsEarly", testListStopsEarly},
		{"ListMoreThan1000", testListMany},
		{"ListAfter", testListAfter},
		{"InvalidKeys", testInvalidKeys},
		{"UnusualValidKeys", testUnusualValidKeys},
		{"ContextCanceled", testContextCanceled},
		{"LargeValues", testLargeValues},
		{"Watch", testWatch},
		{"Commit", func(t *testing.T, s *storage.Store) { testCommit(t, s, c) }},
	}
}

// Checks names the suite's checks, the subtests Run starts, in order.
func Checks() []string {
	var names []string
	for _, c := range checks(Capabilities{}) {
		names = append(names, c.name)
	}
	return names
}

// Run runs the whole conformance suite against the namespaces h makes,
// one per check, each behind storage.New. Checks run in parallel with each
// other. Its Watch check covers the watch contract on drivers that
// implement driver.Watcher, and its Commit check the contract of
// driver.Committer on drivers that implement it; each is skipped on the
// others. The capabilities
// are the harness's to declare, not the driver's (s3store reports its
// conditional Delete as non-atomic since it cannot tell AWS S3 from MinIO;
// a harness on AWS S3 may declare it atomic and have it checked).
func Run(t *testing.T, h Harness) {
	for _, tc := range checks(h.Capabilities()) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, storage.New(h.NewDriver(t)))
		})
	}
}
