package nlm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/nlm"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

// runProcessor runs p until the test ends; stop stops it and returns how long Run
// took to return, failing the test if it took more than limit.
func runProcessor(t *testing.T, p *nlm.Processor, limit time.Duration) (stop func() time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	var took time.Duration
	stop = func() time.Duration {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(limit):
				t.Errorf("Run did not return within %v of its stop", limit)
			}
			took = time.Since(start)
		})
		return took
	}
	t.Cleanup(func() { stop() })
	return stop
}

// poster is an in-process Poster: it serves each callback with handler
// (nil answers 200), records the bodies and tells got about each.
type poster struct {
	handler http.Handler
	mu      sync.Mutex
	bodies  []lifecycle.NLMCallbackBody
	got     chan lifecycle.NLMCallbackBody
}

func newPoster(h http.Handler) *poster {
	return &poster{handler: h, got: make(chan lifecycle.NLMCallbackBody, 100)}
}

func (p *poster) Do(req *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	var cb lifecycle.NLMCallbackBody
	if err := json.Unmarshal(b, &cb); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	if p.handler != nil {
		req.Body = io.NopCloser(strings.NewReader(string(b)))
		p.handler.ServeHTTP(rec, req)
	}
	p.mu.Lock()
	p.bodies = append(p.bodies, cb)
	p.mu.Unlock()
	p.got <- cb
	return rec.Result(), nil
}

func (p *poster) all() []lifecycle.NLMCallbackBody {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]lifecycle.NLMCallbackBody(nil), p.bodies...)
}

// next returns the next callback, failing the test after 10 s of real time.
func (p *poster) next(t *testing.T) lifecycle.NLMCallbackBody {
	t.Helper()
	select {
	case cb := <-p.got:
		return cb
	case <-time.After(10 * time.Second):
		t.Fatal("no callback within 10 s")
		return lifecycle.NLMCallbackBody{}
	}
}

// watched is a store that tells about every write, so a test waits for a
// state instead of sleeping.
type watched struct {
	driver.Store
	changed chan struct{}
	// onPut, when set, sees every successful Put.
	onPut func(key string, v []byte)
}

func watch(s *storage.Store) *watched { return &watched{Store: s, changed: make(chan struct{}, 1)} }

func (w *watched) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *watched) Put(ctx context.Context, key string, v []byte, c storage.Condition) (storage.Version, error) {
	defer w.poke()
	ver, err := w.Store.Put(ctx, key, v, c)
	if err == nil && w.onPut != nil {
		w.onPut(key, v)
	}
	return ver, err
}

func (w *watched) Delete(ctx context.Context, key string, c storage.Condition) error {
	defer w.poke()
	return w.Store.Delete(ctx, key, c)
}

// until waits for cond to hold after some write, failing the test after
// 10 s of real time.
func (w *watched) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-w.changed:
		case <-deadline:
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// jobIs tells whether the job's record is in state s.
func jobIs(p *nlm.Processor, id string, s lifecycle.NLMState) func() bool {
	return func() bool {
		j, err := p.Get(context.Background(), id)
		return err == nil && j.Status == s
	}
}

// replay posts cb to the poster's handler again and returns its status.
func (p *poster) replay(t *testing.T, cb lifecycle.NLMCallbackBody) int {
	t.Helper()
	b, _ := json.Marshal(cb)
	req := httptest.NewRequest(http.MethodPost, "https://conveyor.example/nlm/callback", strings.NewReader(string(b)))
	rec := httptest.NewRecorder()
	p.handler.ServeHTTP(rec, req)
	return rec.Code
}
