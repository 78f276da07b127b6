// Package teststores hands tests the stores every path must be proven on:
// memstore, an s3store on a real MinIO (started once per test binary by
// internal/testkit/miniotest, skipped or failed per CONVEYOR_REQUIRE_MINIO)
// and a SQLite file, the Worker's default.
package teststores

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/adapters/sqlitestore"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/storage"
)

// Env is one test binary's MinIO: a server, a bucket and an HTTP transport
// shared by every client, all created on first use. The zero value is
// ready; TestMain must call Close after m.Run.
type Env struct {
	server    miniotest.Shared
	once      sync.Once
	bucket    string
	bucketErr error
	mu        sync.Mutex
	seq       int
	transport *http.Transport
}

func (e *Env) rt() *http.Transport {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.transport == nil {
		e.transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}
	}
	return e.transport
}

// MinIO returns the server and bucket, starting them on first use.
func (e *Env) MinIO(tb testing.TB) (*miniotest.Server, string) {
	tb.Helper()
	srv := e.server.Get(tb)
	e.once.Do(func() { e.bucket, e.bucketErr = srv.CreateBucket(context.Background()) })
	if e.bucketErr != nil {
		tb.Fatalf("creating bucket: %v", e.bucketErr)
	}
	return srv, e.bucket
}

// S3At returns an s3store on the bucket under prefix (ending in "/").
func (e *Env) S3At(tb testing.TB, prefix string) *storage.Store {
	tb.Helper()
	srv, bkt := e.MinIO(tb)
	s, err := s3store.NewWithClient(srv.Client(&http.Client{Transport: e.rt()}), bkt, prefix)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// S3 returns an s3store under a prefix of its own.
func (e *Env) S3(tb testing.TB) *storage.Store {
	e.mu.Lock()
	e.seq++
	n := e.seq
	e.mu.Unlock()
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, tb.Name())
	if len(name) > 60 {
		name = name[:60]
	}
	return e.S3At(tb, fmt.Sprintf("t%d-%s/", n, name))
}

// SQLite returns a sqlitestore on a file of tb's own, closed when tb
// ends: the Worker's default store.
func SQLite(tb testing.TB) *storage.Store {
	tb.Helper()
	s, err := sqlitestore.New(context.Background(), sqlitestore.Config{Path: filepath.Join(tb.TempDir(), "store.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// Case is one store to run a test on.
type Case struct {
	Name string
	New  func(testing.TB) *storage.Store
}

// Cases lists memstore, MinIO and a SQLite file (the Worker's default:
// under -race it added 0-8 s to each package that runs Each, the most
// to internal/schedule's exactly-once proof, 16 s beside MinIO's 22 s).
func (e *Env) Cases() []Case {
	return []Case{
		{"memstore", func(testing.TB) *storage.Store { return memstore.New() }},
		{"minio", e.S3},
		{"sqlite", SQLite},
	}
}

// Each runs f, in parallel subtests, on memstore, MinIO and SQLite.
func (e *Env) Each(t *testing.T, f func(t *testing.T, s *storage.Store)) {
	t.Helper()
	for _, c := range e.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			f(t, c.New(t))
		})
	}
}

// Close stops MinIO and closes idle connections; call it after m.Run.
func (e *Env) Close() error {
	e.mu.Lock()
	if e.transport != nil {
		e.transport.CloseIdleConnections()
	}
	e.mu.Unlock()
	return e.server.Stop()
}

// Wrap returns m with a Run that closes e after the tests, so that
// goleak.VerifyTestMain(env.Wrap(m)) checks for leaks after MinIO stopped.
func (e *Env) Wrap(m *testing.M) interface{ Run() int } { return runner{m: m, e: e} }

type runner struct {
	m *testing.M
	e *Env
}

func (r runner) Run() int {
	code := r.m.Run()
	if err := r.e.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping MinIO:", err)
		code = 1
	}
	return code
}

// Client returns a raw aws-sdk-go-v2 client for the MinIO, on the shared
// transport, and the bucket: for baselines measured beside an s3store.
func (e *Env) Client(tb testing.TB) (*s3.Client, string) {
	tb.Helper()
	srv, bkt := e.MinIO(tb)
	return srv.Client(&http.Client{Transport: e.rt()}), bkt
}
