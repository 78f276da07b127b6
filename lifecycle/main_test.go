package lifecycle_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/miniotest"
	"github.com/runconveyor/conveyor/storage"
	"go.uber.org/goleak"
)

// One MinIO process and bucket for the package; each test gets its own key
// prefix.
var (
	minio      miniotest.Shared
	bucketOnce sync.Once
	bucket     string
	bucketErr  error
	transport  = &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}
)

type suite struct{ m *testing.M }

func (s suite) Run() int {
	code := s.m.Run()
	transport.CloseIdleConnections()
	if err := minio.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping MinIO:", err)
		code = 1
	}
	return code
}

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	goleak.VerifyTestMain(suite{m})
}

// minioStore returns an s3store on the shared MinIO under a fresh prefix,
// skipping (or, in CI, failing) when there is no MinIO binary.
func minioStore(t testing.TB) storage.Store {
	t.Helper()
	srv := minio.Get(t)
	bucketOnce.Do(func() { bucket, bucketErr = srv.CreateBucket(context.Background()) })
	if bucketErr != nil {
		t.Fatalf("creating bucket: %v", bucketErr)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: transport}), bucket, "t-"+hex.EncodeToString(b)+"/")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func memStore(testing.TB) storage.Store { return memstore.New() }
