package s3store_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/s3store"
	"github.com/runconveyor/conveyor/internal/audit"
	"github.com/runconveyor/conveyor/internal/testkit/miniotest"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// What a faultProxy does with one request.
type fault int

const (
	pass        fault = iota
	answer499         // forward it, then answer 499 ClientDisconnected, as a stopping MinIO node
	reset             // forward it, then close the connection without an answer
	refuse499         // answer 499 without forwarding it
	stall             // hold it, unanswered, until the client gives up
	passAndDrop       // forward it and answer, but count it as dropped (for the log)
	slow              // hold it slowWrite, then forward it; "left" in the log if the client went meanwhile
	notFound          // answer 404 NoSuchKey without forwarding it, as a node short of its read quorum
)

// slowWrite is how long the slow fault holds a request.
const slowWrite = 400 * time.Millisecond

// faultProxy is a small HTTP proxy on 127.0.0.1 in front of a real MinIO
// that does to each request what rule says: the faults of a node that
// stops, resets or stalls, on a real server's real writes. It keeps the
// client's Host header, which the request's signature covers.
type faultProxy struct {
	*httptest.Server
	target string
	rule   func(n int, r *http.Request) fault

	mu  sync.Mutex
	n   int
	log []string
}

func newFaultProxy(t *testing.T, target string, rule func(n int, r *http.Request) fault) *faultProxy {
	t.Helper()
	p := &faultProxy{target: target, rule: rule}
	p.Server = httptest.NewServer(p)
	t.Cleanup(p.Close)
	return p
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.n++
	f := p.rule(p.n, r)
	p.log = append(p.log, r.Method+":"+[]string{"pass", "499", "reset", "refuse499", "stall", "pass", "slow", "404"}[f])
	p.mu.Unlock()
	switch f {
	case slow:
		// Read the body first, so that the server notices the client leaving.
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		select {
		case <-r.Context().Done():
			p.mu.Lock()
			p.log = append(p.log, r.Method+":left")
			p.mu.Unlock()
			return
		case <-time.After(slowWrite):
		}
	case stall:
		// Read the body, so that the server notices the client leaving;
		// MinIO's lock wait ends after 30 s.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	case refuse499:
		write499(w)
		return
	case notFound:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>`)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host
	out.ContentLength = r.ContentLength
	resp, err := transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	switch f {
	case answer499:
		_, _ = io.Copy(io.Discard, resp.Body)
		write499(w)
		return
	case reset:
		_, _ = io.Copy(io.Discard, resp.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not a clean close
			}
			_ = conn.Close()
		}
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// write499 answers as MinIO does when it drops a request while stopping.
func write499(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(499)
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>ClientDisconnected</Code><Message>Client disconnected before response was ready</Message></Error>`)
}

func (p *faultProxy) requests() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, " ")
}

// storeVia is a Store built as a Worker builds it (New), on endpoints.
func storeVia(t *testing.T, srv *miniotest.Server, bkt, prefix string, cfg s3store.Config) *s3Store {
	t.Helper()
	cfg.Bucket, cfg.Prefix, cfg.Region, cfg.UsePathStyle = bkt, prefix, srv.Region, true
	cfg.AccessKeyID, cfg.SecretAccessKey = srv.AccessKey, srv.SecretKey
	cfg.HTTPClient = &http.Client{Transport: transport}
	s, err := openStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// onFirst applies f to the first n requests of method (any method if
// empty), and lets the others pass.
func onFirst(method string, n int, f fault) func(int, *http.Request) fault {
	var mu sync.Mutex
	seen := 0
	return func(_ int, r *http.Request) fault {
		mu.Lock()
		defer mu.Unlock()
		if method != "" && r.Method != method {
			return pass
		}
		if seen++; seen <= n {
			return f
		}
		return pass
	}
}

// TestStoppingNode: a request a stopping node drops (499, or the
// connection reset after the write was carried out) is retried, and a
// conditional write that landed is a success, not an error (the issue saw
// 499s answered 500 INTERNAL_ERROR, and audit writes lost to them).
func TestStoppingNode(t *testing.T) {
	srv, bkt := env(t)
	tests := []struct {
		name   string
		method string
		fault  fault
		seed   bool // "before" is at k first
		op     func(t *testing.T, s *s3Store, v storage.Version) error
	}{
		{"create-only put, landed then 499", http.MethodPut, answer499, false, func(t *testing.T, s *s3Store, _ storage.Version) error {
			_, err := s.Put(t.Context(), "k", []byte("mine"), storage.IfNotExists())
			return err
		}},
		{"if-match put, landed then reset", http.MethodPut, reset, true, func(t *testing.T, s *s3Store, v storage.Version) error {
			_, err := s.Put(t.Context(), "k", []byte("mine"), storage.IfMatch(v))
			return err
		}},
		{"create-only put, 499 before it was carried out", http.MethodPut, refuse499, false, func(t *testing.T, s *s3Store, _ storage.Version) error {
			_, err := s.Put(t.Context(), "k", []byte("mine"), storage.IfNotExists())
			return err
		}},
		{"get, 499", http.MethodGet, answer499, true, func(t *testing.T, s *s3Store, _ storage.Version) error {
			b, _, err := s.Get(t.Context(), "k")
			if err == nil && string(b) != "before" {
				t.Fatalf("Get = %q", b)
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := randomPrefix()
			var v storage.Version
			if tt.seed {
				direct, err := openWithClient(newClient(srv, nil), bkt, prefix)
				if err != nil {
					t.Fatal(err)
				}
				if v, err = direct.Put(t.Context(), "k", []byte("before"), storage.Condition{}); err != nil {
					t.Fatal(err)
				}
			}
			p := newFaultProxy(t, srv.Endpoint, onFirst(tt.method, 1, tt.fault))
			s := storeVia(t, srv, bkt, prefix, s3store.Config{Endpoint: p.URL})
			if err := tt.op(t, s, v); err != nil {
				t.Fatalf("%v (requests: %s)", err, p.requests())
			}
			if tt.method == http.MethodPut {
				if b, _, err := s.Get(t.Context(), "k"); err != nil || string(b) != "mine" {
					t.Fatalf("after the Put, Get = %q %v", b, err)
				}
			}
			if r := p.requests(); !strings.Contains(r, "499") && !strings.Contains(r, "reset") {
				t.Fatalf("no fault was injected: %s", r)
			}
		})
	}
}

// TestNoAnswerIsOutcomeUnknown: when every attempt of a conditional write
// lost its answer and the read-back fails too, the write may have landed:
// the error matches storage.ErrOutcomeUnknown (never a plain failure a
// caller could retry into a false conflict) and is transient, so a
// patient caller retries it as such.
func TestNoAnswerIsOutcomeUnknown(t *testing.T) {
	srv, bkt := env(t)
	p := newFaultProxy(t, srv.Endpoint, func(int, *http.Request) fault { return answer499 })
	s := storeVia(t, srv, bkt, randomPrefix(), s3store.Config{Endpoint: p.URL, MaxAttempts: 2})
	_, err := s.Put(t.Context(), "k", []byte("mine"), storage.IfNotExists())
	if !errors.Is(err, storage.ErrOutcomeUnknown) || !storage.Transient(err) || errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("Put = %v (outcome unknown %v, transient %v), want an unknown outcome, transient (requests: %s)",
			err, errors.Is(err, storage.ErrOutcomeUnknown), storage.Transient(err), p.requests())
	}
	// An unconditional write is simply retried: no outcome to be unsure of.
	_, err = s.Put(t.Context(), "u", []byte("mine"), storage.Condition{})
	if errors.Is(err, storage.ErrOutcomeUnknown) || !storage.Transient(err) {
		t.Fatalf("unconditional Put = %v, want a transient failure", err)
	}
}

// TestAuditNeverLostTo499: an audit event whose write a stopping node
// carried out but answered 499, as it did the read-back, is written once
// and audit.Put succeeds (the issue lost 2 audit writes this way): through
// a patient Store, as the engines make, and straight on the store, which
// then says the outcome is unknown.
func TestAuditNeverLostTo499(t *testing.T) {
	srv, bkt := env(t)
	for _, patient := range []bool{true, false} {
		t.Run(fmt.Sprintf("patient=%v", patient), func(t *testing.T) {
			// Every attempt of the first Put (the first lands) and of its
			// read-back is answered 499.
			p := newFaultProxy(t, srv.Endpoint, onFirst("", 6, answer499))
			s := storeVia(t, srv, bkt, randomPrefix(), s3store.Config{Endpoint: p.URL}).Store
			if patient {
				s = s.Patient(storage.Retry{Clock: clock.Real()})
			}
			body := []byte(`{"event":"run.created"}`)
			if err := audit.Put(t.Context(), s, "audit/e1.json", body); err != nil {
				t.Fatalf("audit.Put = %v (requests: %s)", err, p.requests())
			}
			if !strings.Contains(p.requests(), "PUT:499") {
				t.Fatalf("no fault was injected: %s", p.requests())
			}
			b, _, err := s.Get(t.Context(), "audit/e1.json")
			if err != nil || string(b) != string(body) {
				t.Fatalf("audit object = %q, %v", b, err)
			}
		})
	}
}
