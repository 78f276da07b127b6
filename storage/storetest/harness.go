package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// Option declares a capability for TestStore.
type Option func(*Capabilities)

// ContentVersions declares Capabilities.ContentVersions.
func ContentVersions() Option { return func(c *Capabilities) { c.ContentVersions = true } }

// NonAtomicConditionalDelete declares Capabilities.NonAtomicConditionalDelete.
func NonAtomicConditionalDelete() Option {
	return func(c *Capabilities) { c.NonAtomicConditionalDelete = true }
}

// NewDriver returns an empty driver for one subtest. The suite calls it
// once per subtest; an adapter may hand out views of one backend (a fresh
// key prefix or bucket each time) and register cleanup with t.Cleanup.
type NewDriver func(t *testing.T) driver.Store

// TestDriver runs the whole conformance suite against the drivers
// newDriver makes, with the capabilities opts declare: Run with a Harness
// built of the two.
func TestDriver(t *testing.T, newDriver NewDriver, opts ...Option) {
	var c Capabilities
	for _, opt := range opts {
		opt(&c)
	}
	Run(t, funcHarness{newDriver, c})
}

type funcHarness struct {
	newDriver NewDriver
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
// implement driver.Watcher and is skipped on the others. The capabilities
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

// Namespaces is a Harness on a store that already runs: each check's
// namespace is Open(namespace), a name no other check or run uses (a key
// prefix of one bucket, a directory of one disk), and Remove empties it
// when the check ends, whatever its outcome.
type Namespaces struct {
	// Open returns the driver at namespace: a string of letters, digits
	// and "-", ending in "/", unique to one check of one run.
	Open func(ctx context.Context, namespace string) (driver.Store, error)
	// Remove removes namespace and what s holds in it. Nil: EmptyStore.
	Remove func(ctx context.Context, namespace string, s *storage.Store) error
	// Caps are the store's capabilities.
	Caps Capabilities
	// CleanupTimeout bounds each Remove. Zero: one minute.
	CleanupTimeout time.Duration
}

// Capabilities implements Harness.
func (n Namespaces) Capabilities() Capabilities { return n.Caps }

// NewDriver implements Harness.
func (n Namespaces) NewDriver(t *testing.T) driver.Store {
	t.Helper()
	ns := Namespace(t.Name())
	d, err := n.Open(t.Context(), ns)
	if err != nil {
		t.Fatalf("opening namespace %s: %v", ns, err)
	}
	s := storage.New(d)
	t.Cleanup(func() {
		limit := n.CleanupTimeout
		if limit <= 0 {
			limit = time.Minute
		}
		// The test's own context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		remove := n.Remove
		if remove == nil {
			remove = func(ctx context.Context, _ string, s *storage.Store) error { return EmptyStore(ctx, s) }
		}
		if err := remove(ctx, ns, s); err != nil {
			t.Errorf("removing namespace %s: %v", ns, err)
		}
	})
	return d
}

// Namespace is a fresh namespace name for the check named name (a
// t.Name()): its last element, letters, digits and "-" only, then random
// hex and "/".
func Namespace(name string) string {
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	var b strings.Builder
	for _, r := range name {
		if r < 0x80 && (r == '-' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z')) {
			b.WriteRune(r)
		}
		if b.Len() == 40 {
			break
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return b.String() + "-" + hex.EncodeToString(rnd[:]) + "/"
}

// EmptyStore deletes every key s lists: the default cleanup of a
// namespace. A key it cannot delete does not stop it; every error is
// returned.
func EmptyStore(ctx context.Context, s *storage.Store) error {
	var keys []string
	var errs []error
	for k, err := range s.List(ctx, "") {
		if err != nil {
			errs = append(errs, err)
			break
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := s.Delete(ctx, k, storage.Condition{}); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d keys listed: %w", len(keys), errors.Join(errs...))
	}
	return nil
}
