package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// unsureStore answers every Put under prefix as an S3 store does when a
// node stops mid-request: the write landed (or not), and the store cannot
// tell (storage.ErrOutcomeUnknown), or the node dropped it (a 499).
type unsureStore struct {
	driver.Store
	prefix string
	err    func(key string) error
}

func (s *unsureStore) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	if strings.HasPrefix(key, s.prefix) {
		return "", s.err(key)
	}
	return s.Store.Put(ctx, key, value, cond)
}

type status499 struct{}

func (status499) Error() string {
	return "api error ClientDisconnected: Client disconnected before response was ready"
}
func (status499) HTTPStatusCode() int { return 499 }

// TestStoreTroubleIsUpstream: a write whose outcome the store cannot tell,
// or a store failure that passes, is answered 502 UPSTREAM_UNAVAILABLE,
// never 500 INTERNAL_ERROR (the issue saw job submits answered 500 "put
// queue/agents/<agent>.json: outcome unknown").
func TestStoreTroubleIsUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  func(key string) error
	}{
		{"outcome unknown", func(key string) error {
			return &storage.OpError{Op: "put", Key: key, Kind: storage.ErrOutcomeUnknown, Cause: syscall.ECONNRESET}
		}},
		{"499 from a stopping node, until the request's deadline", func(key string) error {
			return &storage.OpError{Op: "put", Key: key, Cause: status499{}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			store := &unsureStore{Store: memstore.New(), prefix: "queue/", err: tt.err}
			log := slog.New(slog.DiscardHandler)
			runner, err := run.NewRunner(run.Config{Store: storage.New(store), Logger: log}, run.Agent{Slug: "quick", Steps: []run.Step{quickStep("load")}})
			if err != nil {
				t.Fatal(err)
			}
			q, err := jobqueue.New(jobqueue.Config{Store: storage.New(store), Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := httpapi.New(httpapi.Config{Runner: runner, Queue: q, Logger: log, RequestTimeout: time.Second,
				Tokens: map[string]lifecycle.Actor{"t": lifecycle.ActorGateway}})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			req, _ := http.NewRequest("POST", ts.URL+"/jobs", strings.NewReader(`{"job_id":"job-1","job_type":"BRIEF"}`))
			req.Header.Set("Authorization", "Bearer t")
			req.Header.Set("Content-Type", "application/json")
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct{ Code, Message string }
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != http.StatusBadGateway || e.Code != codes.UpstreamUnavailable {
				t.Fatalf("POST /jobs = %d %s %q, want 502 %s", resp.StatusCode, e.Code, e.Message, codes.UpstreamUnavailable)
			}
		})
	}
}
