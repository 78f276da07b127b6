package jobqueue_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/filestore"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/storage"
)

// env is the package's MinIO: one server and bucket (starting MinIO costs
// seconds), each test under its own key prefix.
var env teststores.Env

func TestMain(m *testing.M) { goleak.VerifyTestMain(env.Wrap(m)) }

type storeCase struct {
	name string
	new  func(testing.TB) *storage.Store
}

var stores = []storeCase{
	{"memstore", func(testing.TB) *storage.Store { return memstore.New() }},
	{"minio", env.S3},
}

// forEachStore runs f on memstore and on a real MinIO.
func forEachStore(t *testing.T, f func(t *testing.T, s *storage.Store)) {
	t.Helper()
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			f(t, sc.new(t))
		})
	}
}

// fileStore is a filestore in a directory of the test's own.
func fileStore(tb testing.TB) *storage.Store {
	tb.Helper()
	s, err := filestore.New(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// faultStores are the stores the fault suite runs on: memstore, filestore
// and SQLite always, MinIO (withS3) where the fault is about S3.
func faultStores(withS3 bool) []storeCase {
	cs := []storeCase{stores[0], {"filestore", fileStore}, {"sqlite", teststores.SQLite}}
	if withS3 {
		cs = append(cs, stores[1])
	}
	return cs
}

// forFaultStores runs f, in parallel subtests, on faultStores(withS3).
func forFaultStores(t *testing.T, withS3 bool, f func(t *testing.T, s *storage.Store)) {
	t.Helper()
	for _, sc := range faultStores(withS3) {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			f(t, sc.new(t))
		})
	}
}
