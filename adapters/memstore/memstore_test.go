package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
	"github.com/runconveyor/conveyor/storage/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.TestDriver(t, func(*testing.T) driver.Store { return memstore.NewDriver() }, storetest.Capabilities{})
}

func BenchmarkMemstore(b *testing.B) {
	storetest.BenchmarkStore(b, func(*testing.B) *storage.Store { return memstore.New() })
}

// BenchmarkListAfter: the last 10 keys after 1k and 100k (flat: a seek).
func BenchmarkListAfter(b *testing.B) {
	storetest.BenchmarkListAfter(b, func(*testing.B) *storage.Store { return memstore.New() }, 1000, 100_000)
}
