package jobqueue_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/miniotest"
	"github.com/runconveyor/conveyor/storage"
)

// One MinIO process and one bucket for the whole package (starting MinIO
// costs seconds); each test gets its own key prefix.
var (
	server     miniotest.Shared
	bucketOnce sync.Once
	bucket     string
	bucketErr  error
	// transport is shared so TestMain can close its idle connections before
	// goleak looks for leftover goroutines.
	transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
)

type runner struct{ m *testing.M }

func (r runner) Run() int {
	code := r.m.Run()
	transport.CloseIdleConnections()
	if err := server.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping MinIO:", err)
		code = 1
	}
	return code
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(runner{m})
}

func minioEnv(tb testing.TB) (*miniotest.Server, string) {
	tb.Helper()
	srv := server.Get(tb)
	bucketOnce.Do(func() { bucket, bucketErr = srv.CreateBucket(context.Background()) })
	if bucketErr != nil {
		tb.Fatalf("creating bucket: %v", bucketErr)
	}
	return srv, bucket
}

var prefixSeq struct {
	sync.Mutex
	n int
}

func minioStoreAt(tb testing.TB, prefix string) storage.Store {
	tb.Helper()
	srv, bkt := minioEnv(tb)
	s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: transport}), bkt, prefix)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func minioStore(tb testing.TB) storage.Store {
	prefixSeq.Lock()
	prefixSeq.n++
	p := fmt.Sprintf("t%d-%s/", prefixSeq.n, sanitize(tb.Name()))
	prefixSeq.Unlock()
	return minioStoreAt(tb, p)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 60 {
		b = b[:60]
	}
	return string(b)
}

type storeCase struct {
	name string
	new  func(testing.TB) storage.Store
}

var stores = []storeCase{
	{"memstore", func(testing.TB) storage.Store { return memstore.New() }},
	{"minio", minioStore},
}

// forEachStore runs f on memstore and on a real MinIO.
func forEachStore(t *testing.T, f func(t *testing.T, s storage.Store)) {
	t.Helper()
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			f(t, sc.new(t))
		})
	}
}
