package page_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// gate is a Worker's handler whose answer to one chosen request is held
// back until the test releases it: the answer is made when the request
// arrives (so it tells the state of then) and sent late, after the answers
// to requests the page made later. That is a slow read overtaken by a
// newer one, made to happen every time rather than under load only.
type gate struct {
	next http.Handler

	mu      sync.Mutex
	pick    func(*http.Request) bool // the request to hold; nil: none
	held    chan struct{}            // closed once it is held
	release chan struct{}            // closing it sends its answer

	// jobReads counts the reads of GET /jobs by their limit parameter.
	jobReads sync.Map // limit → *atomic.Int64
	// reads counts every GET by its path.
	reads sync.Map // path → *atomic.Int64
}

// readsOf is how many GETs of path the gate passed.
func (g *gate) readsOf(path string) int64 {
	n, ok := g.reads.Load(path)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// jobReadsOf is how many GET /jobs with that limit the gate passed.
func (g *gate) jobReadsOf(limit string) int64 {
	n, ok := g.jobReads.Load(limit)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func newGate(next http.Handler) *gate { return &gate{next: next} }

// hold arms the gate for the first request pick chooses. held is closed
// once that request's answer is made and waiting; release sends it (it
// may be called more than once).
func (g *gate) hold(pick func(*http.Request) bool) (held <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pick, g.held, g.release = pick, make(chan struct{}), make(chan struct{})
	rel := g.release
	var once sync.Once
	return g.held, func() { once.Do(func() { close(rel) }) }
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		n, _ := g.reads.LoadOrStore(r.URL.Path, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if r.Method == http.MethodGet && r.URL.Path == "/jobs" {
		n, _ := g.jobReads.LoadOrStore(r.URL.Query().Get("limit"), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	g.mu.Lock()
	held, release := g.held, g.release
	mine := g.pick != nil && g.pick(r)
	if mine {
		g.pick = nil
	}
	g.mu.Unlock()
	if !mine {
		g.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	g.next.ServeHTTP(rec, r)
	close(held)
	select {
	case <-release:
	case <-r.Context().Done(): // the page went away: nothing to send
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}
