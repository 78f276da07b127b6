package s3proxy_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/internal/testkit/s3proxy"
	"github.com/runconveyor/conveyor/storage"
)

var minio miniotest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := minio.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping MinIO:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestStripsConditions: through the proxy every request still reaches
// MinIO signed (reads, writes, lists, deletes work), and conditions are
// gone: a create-only Put over an existing key and a compare-and-swap with
// a stale version both succeed, where MinIO itself refuses them.
func TestStripsConditions(t *testing.T) {
	t.Parallel()
	srv := minio.Get(t)
	bucket, err := srv.CreateBucket(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p := s3proxy.New(t, srv)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	open := func(endpoint string) *storage.Store {
		s, err := s3store.New(t.Context(), s3store.Config{Bucket: bucket, Endpoint: endpoint, Region: srv.Region, UsePathStyle: true,
			AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		store    *storage.Store
		stripped bool
	}{{"minio", open(srv.Endpoint), false}, {"through the proxy", open(p.Endpoint), true}} {
		key := "k/é: " + tc.name // escaped on the wire: the proxy signs it as sent
		v1, err := tc.store.Put(ctx, key, []byte("1"), storage.IfNotExists())
		if err != nil {
			t.Fatalf("%s: create: %v", tc.name, err)
		}
		if _, err := tc.store.Put(ctx, key, []byte("2"), storage.IfMatch(v1)); err != nil {
			t.Fatalf("%s: swap: %v", tc.name, err)
		}
		_, errCreate := tc.store.Put(ctx, key, []byte("3"), storage.IfNotExists())
		_, errStale := tc.store.Put(ctx, key, []byte("4"), storage.IfMatch(v1))
		for what, err := range map[string]error{"create-only over an existing key": errCreate, "swap with a stale version": errStale} {
			if tc.stripped && err != nil {
				t.Errorf("%s: %s: %v, want success", tc.name, what, err)
			}
			if !tc.stripped && !errors.Is(err, storage.ErrPreconditionFailed) {
				t.Errorf("%s: %s: %v, want precondition failed", tc.name, what, err)
			}
		}
		n := 0
		for _, err := range tc.store.List(ctx, "") {
			if err != nil {
				t.Fatalf("%s: list: %v", tc.name, err)
			}
			n++
		}
		if err := tc.store.Delete(ctx, key, storage.Condition{}); err != nil || n == 0 {
			t.Fatalf("%s: listed %d, delete: %v", tc.name, n, err)
		}
	}
	if p.Stripped.Load() == 0 {
		t.Error("the proxy counted no stripped request")
	}
}
