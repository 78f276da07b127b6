package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/storage"
)

// TestFailover: with several endpoints, a request pointed at one that is
// down, drops requests or stalls is carried out through another, within
// an attempt timeout, not the stall's 30 s.
func TestFailover(t *testing.T) {
	srv, bkt := env(t)
	dead := "http://127.0.0.1:1"
	tests := []struct {
		name string
		rule func(int, *http.Request) fault
	}{
		{"refused", nil},
		{"499 on everything", func(int, *http.Request) fault { return refuse499 }},
		{"stalls", func(int, *http.Request) fault { return stall }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := dead
			if tt.rule != nil {
				bad = newFaultProxy(t, srv.Endpoint, tt.rule).URL
			}
			s := storeVia(t, srv, bkt, randomPrefix(), s3store.Config{
				Endpoints: []string{bad, srv.Endpoint}, AttemptTimeout: 300 * time.Millisecond})
			start := time.Now()
			for i := range 4 { // both endpoints come first in turn
				key := "k" + string(rune('0'+i))
				v, err := s.Put(t.Context(), key, []byte("mine"), storage.IfNotExists())
				if err != nil {
					t.Fatalf("Put %s = %v", key, err)
				}
				if _, got, err := s.Get(t.Context(), key); err != nil || got != v {
					t.Fatalf("Get %s = %q %v, want %q", key, got, err, v)
				}
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("4 writes and reads took %s with one endpoint failing", d)
			}
		})
	}
}

// TestWriteOutlivesCallerContext: a write once sent is carried to its
// answer when the caller's context ends before it (within the attempt
// timeout), and no write is sent once it has ended. MinIO loses an object
// whose conditional overwrite the client cuts mid-request (on a 4-node
// cluster, 13 of 46 cut If-Match overwrites with a node down, 2 of 12 with
// every node up: the key then read 404 on every node, docs/stores.md);
// the Worker's poll pass cut one when its time was up, and an
// acknowledged run read 404 for good.
func TestWriteOutlivesCallerContext(t *testing.T) {
	srv, bkt := env(t)
	tests := []struct {
		name string
		op   func(ctx context.Context, s *storage.Store, v storage.Version) error
	}{
		{"if-match put", func(ctx context.Context, s *storage.Store, v storage.Version) error {
			_, err := s.Put(ctx, "k", []byte("mine"), storage.IfMatch(v))
			return err
		}},
		{"create-only put", func(ctx context.Context, s *storage.Store, _ storage.Version) error {
			_, err := s.Put(ctx, "new", []byte("mine"), storage.IfNotExists())
			return err
		}},
		{"delete", func(ctx context.Context, s *storage.Store, _ storage.Version) error {
			return s.Delete(ctx, "k", storage.Condition{})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := randomPrefix()
			direct, err := s3store.NewWithClient(newClient(srv, nil), bkt, prefix)
			if err != nil {
				t.Fatal(err)
			}
			v, err := direct.Put(t.Context(), "k", []byte("before"), storage.Condition{})
			if err != nil {
				t.Fatal(err)
			}
			p := newFaultProxy(t, srv.Endpoint, func(_ int, r *http.Request) fault {
				if r.Method == http.MethodPut || r.Method == http.MethodDelete {
					return slow
				}
				return pass
			})
			s := storeVia(t, srv, bkt, prefix, s3store.Config{Endpoint: p.URL, AttemptTimeout: 5 * time.Second})
			ctx, cancel := context.WithTimeout(t.Context(), slowWrite/4)
			defer cancel()
			if err := tt.op(ctx, s.Store, v); err != nil {
				t.Errorf("with the context ended during the write: %v, want its answer (requests: %s)", err, p.requests())
			}
			if r := p.requests(); strings.Contains(r, "left") || !strings.Contains(r, "slow") {
				t.Errorf("requests: %s, want the write held and carried out, never left", r)
			}
			before := len(p.requests())
			if err := tt.op(ctx, s.Store, v); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, storage.ErrOutcomeUnknown) {
				t.Errorf("with the context ended before: %v, want the context's error (not an unknown outcome)", err)
			}
			if len(p.requests()) != before {
				t.Errorf("a write was sent with the context ended: %s", p.requests()[before:])
			}
		})
	}
}

// TestSettle: a single-drive server settles at once; several endpoints
// (a cluster) get DefaultClusterSettle unless Config.Settle says
// otherwise.
func TestSettle(t *testing.T) {
	srv, bkt := env(t)
	tests := []struct {
		name string
		cfg  s3store.Config
		want time.Duration
	}{
		{"single drive", s3store.Config{Endpoint: srv.Endpoint}, 0},
		{"one endpoint given twice", s3store.Config{Endpoints: []string{srv.Endpoint, srv.Endpoint + "/"}}, 0},
		{"explicit", s3store.Config{Endpoint: srv.Endpoint, Settle: 3 * time.Second}, 3 * time.Second},
		{"explicitly none", s3store.Config{Endpoint: srv.Endpoint, Settle: -1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := storeVia(t, srv, bkt, "", tt.cfg)
			if err := s.Check(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := s.Store.SettleTime(); got != tt.want {
				t.Fatalf("Settle = %s, want %s", got, tt.want)
			}
		})
	}
	p := newFaultProxy(t, srv.Endpoint, func(int, *http.Request) fault { return pass })
	s := storeVia(t, srv, bkt, "", s3store.Config{Endpoints: []string{srv.Endpoint, p.URL}})
	if got := s.Store.SettleTime(); got != s3store.DefaultClusterSettle {
		t.Fatalf("Settle on two endpoints = %s, want %s", got, s3store.DefaultClusterSettle)
	}
}

// TestEndpointsFromEnv: CONVEYOR_S3_ENDPOINTS names several endpoints,
// comma-separated; the store fails over from one that is down.
func TestEndpointsFromEnv(t *testing.T) {
	srv, bkt := env(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv(s3store.EnvBucket, bkt)
	t.Setenv(s3store.EnvPrefix, randomPrefix())
	t.Setenv(s3store.EnvEndpoints, "http://127.0.0.1:1, "+srv.Endpoint)
	cfg, err := s3store.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.UsePathStyle || len(cfg.Endpoints) != 2 {
		t.Fatalf("config from env = %+v", cfg)
	}
	cfg.HTTPClient = &http.Client{Transport: transport}
	s, err := openStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := s.Put(t.Context(), fmt.Sprintf("k%d", i), []byte("ok"), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"ftp://127.0.0.1:1", "127.0.0.1:9000", "http://"} {
		if _, err := openStore(t.Context(), s3store.Config{Bucket: bkt, Endpoint: bad}); err == nil {
			t.Errorf("New with endpoint %q succeeded", bad)
		}
	}
}

// TestEndpointComesBack: an endpoint that failed is skipped for the
// cooldown, then tried again, and used as before once it answers.
func TestEndpointComesBack(t *testing.T) {
	srv, bkt := env(t)
	var down atomic.Bool
	down.Store(true)
	p := newFaultProxy(t, srv.Endpoint, func(int, *http.Request) fault {
		if down.Load() {
			return refuse499
		}
		return pass
	})
	s := storeVia(t, srv, bkt, randomPrefix(), s3store.Config{
		Endpoints: []string{p.URL, srv.Endpoint}, EndpointCooldown: 300 * time.Millisecond})
	put := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := s.Put(t.Context(), fmt.Sprintf("k%d", i), []byte("v"), storage.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(10)
	if got := strings.Count(p.requests(), "refuse499"); got != 1 {
		t.Fatalf("the failing endpoint got %d requests within its cooldown, want 1: %s", got, p.requests())
	}
	down.Store(false)
	time.Sleep(400 * time.Millisecond)
	put(10)
	if got := strings.Count(p.requests(), "pass"); got < 4 {
		t.Fatalf("the endpoint that came back got %d of 10 requests, want about half: %s", got, p.requests())
	}
}

// TestNotFoundAskedOfTheOtherNodes: on a cluster a node short of its read
// quorum answers 404 for keys that exist (4 acknowledged runs read 404
// right after through another Worker in the cluster scenario); given
// several endpoints, the store asks another before it believes a
// not-found. A key that is missing everywhere still reads missing.
func TestNotFoundAskedOfTheOtherNodes(t *testing.T) {
	srv, bkt := env(t)
	p := newFaultProxy(t, srv.Endpoint, func(_ int, r *http.Request) fault {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/k") {
			return notFound
		}
		return pass
	})
	s := storeVia(t, srv, bkt, randomPrefix(), s3store.Config{Endpoints: []string{p.URL, srv.Endpoint}})
	if _, err := s.Put(t.Context(), "k", []byte("here"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	for i := range 8 { // each endpoint first, in turn
		if b, _, err := s.Get(t.Context(), "k"); err != nil || string(b) != "here" {
			t.Fatalf("read %d: %q, %v; want the value (requests: %s)", i, b, err, p.requests())
		}
	}
	if !strings.Contains(p.requests(), "404") {
		t.Fatalf("no read met the node that answers 404 (requests: %s)", p.requests())
	}
	if _, _, err := s.Get(t.Context(), "k-missing"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a missing key read %v, want not found", err)
	}
}

// TestNotFoundAskedOfASkippedNode: right after a node rejoins, the others
// answer 503 for a moment and are skipped for a while; a not-found from
// the rejoined node is then asked of a skipped one, not of itself again
// (three acknowledged runs read 404 right after in the cluster scenario).
func TestNotFoundAskedOfASkippedNode(t *testing.T) {
	srv, bkt := env(t)
	short := newFaultProxy(t, srv.Endpoint, func(_ int, r *http.Request) fault {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/k") {
			return notFound
		}
		return pass
	})
	skipped := newFaultProxy(t, srv.Endpoint, func(_ int, r *http.Request) fault {
		if strings.Contains(r.URL.Path, "/warm") {
			return refuse499
		}
		return pass
	})
	s := storeVia(t, srv, bkt, randomPrefix(), s3store.Config{Endpoints: []string{short.URL, skipped.URL}, EndpointCooldown: time.Hour})
	if _, err := s.Put(t.Context(), "k", []byte("here"), storage.IfNotExists()); err != nil {
		t.Fatal(err)
	}
	for range 8 { // until the second endpoint has been skipped
		_, _, _ = s.Get(t.Context(), "warm")
		if strings.Contains(skipped.requests(), "499") {
			break
		}
	}
	if !strings.Contains(skipped.requests(), "499") {
		t.Fatalf("the second endpoint was never refused: %s", skipped.requests())
	}
	if b, _, err := s.Get(t.Context(), "k"); err != nil || string(b) != "here" {
		t.Fatalf("read %q, %v; want the value (short node: %s; skipped node: %s)", b, err, short.requests(), skipped.requests())
	}
}
