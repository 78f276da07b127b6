package jobqueue

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Defaults of the Config's callback fields.
const (
	defaultCallbackAttempts = 10
	defaultCallbackBackoff  = time.Second
	defaultCallbackTimeout  = 10 * time.Second
	// callbackPeriod is the sender's longest wait between two listings of
	// the outbox: how soon an entry left by a process that died is sent.
	// An entry written here wakes it at once.
	callbackPeriod = time.Minute
	// callbackPending bounds how long an entry written before a terminal
	// write that never landed (a store that cannot commit) is kept.
	callbackPending = 24 * time.Hour
)

// callbacksPrefix holds the callback outbox: one entry per job whose
// callback is still to be posted, queue/callbacks/{jobId}.json. Earlier
// releases' sweeps list queue/ and skip keys they do not know.
const callbacksPrefix = "queue/callbacks/"

// callbackKey is the outbox entry of a job.
func callbackKey(jobID string) (string, error) {
	if err := storekey.ValidateID("job id", jobID); err != nil {
		return "", err
	}
	return callbacksPrefix + jobID + ".json", nil
}

// CallbackBody is what the queue posts, as JSON, to the callback URL of a
// job that ended (NewJob.Callback): COMPLETE with its artifact id, DEAD
// with the last attempt's error, or CANCELLED. It is the NLM callback's
// body with the job's type, error code and time of its end beside.
type CallbackBody struct {
	JobID      string             `json:"job_id"`
	JobType    lifecycle.JobType  `json:"job_type"`
	Status     lifecycle.JobState `json:"status"`
	ArtifactID string             `json:"artifact_id,omitempty"`
	ErrorCode  string             `json:"error_code,omitempty"`
	Error      string             `json:"error,omitempty"`
	FinishedAt time.Time          `json:"finished_at"`
}

// callbackFinal tells whether a job in s has ended for its callback:
// COMPLETE, DEAD, CANCELLED. FAILED is not: the bury to DEAD follows at
// once, and the callback waits for it.
func callbackFinal(s lifecycle.JobState) bool {
	return s == lifecycle.JobComplete || s == lifecycle.JobDead || s == lifecycle.JobCancelled
}

// bodyOf is the callback body of job d as it ended.
func bodyOf(d *lifecycle.Job) CallbackBody {
	b := CallbackBody{JobID: d.JobID, JobType: d.JobType, Status: d.Status, ArtifactID: d.ArtifactID,
		ErrorCode: d.ErrorCode, FinishedAt: d.UpdatedAt}
	if d.Error != nil {
		b.Error = *d.Error
	}
	if d.Status != lifecycle.JobComplete {
		b.ArtifactID = ""
	}
	return b
}

// callbackEntry is an outbox entry: the callback of a job to post.
type callbackEntry struct {
	lifecycle.Meta

	JobID    string `json:"job_id"`
	TenantID string `json:"tenant_id,omitempty"`
	URL      string `json:"url"`
	// JobVersion is the job record's version the terminal write gives it.
	JobVersion int64 `json:"job_version"`
	// Joint: written in the commit of the terminal write, so that write
	// landed and Body is the job's end. Otherwise the entry was written
	// just before it (a store that cannot commit), and the sender reads
	// the job to learn whether it landed.
	Joint     bool            `json:"joint,omitempty"`
	Body      CallbackBody    `json:"body"`
	WrittenAt time.Time       `json:"written_at"`
	Attempts  int             `json:"attempts,omitempty"`
	NextAt    time.Time       `json:"next_at,omitzero"`
	LastError string          `json:"last_error,omitempty"`
	Lease     lifecycle.Lease `json:"lease"`
}

// outbox writes the callback entries of the jobs that end, beside their
// terminal write (jobStore.updateJoint), and wakes the sender.
type outbox struct {
	store *storage.Store
	wake  signal

	mu    sync.Mutex
	wrote map[string]bool // the entries written here since the sender's last pass
}

// written notes the entry of jobID written, and wakes the sender.
func (o *outbox) written(jobID string) {
	if key, err := callbackKey(jobID); err == nil {
		o.mu.Lock()
		if o.wrote == nil {
			o.wrote = map[string]bool{}
		}
		o.wrote[key] = true
		o.mu.Unlock()
	}
	o.wake.fire()
}

// putBack returns entries taken by takeWritten that a pass could not
// handle, for the next one.
func (o *outbox) putBack(keys map[string]bool) {
	if len(keys) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.wrote == nil {
		o.wrote = map[string]bool{}
	}
	for k := range keys {
		o.wrote[k] = true
	}
}

// takeWritten returns the entries written since the last call.
func (o *outbox) takeWritten() map[string]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := o.wrote
	o.wrote = nil
	return w
}

// entry is the outbox entry of d, about to be written at version ver, if
// this write ends a job with a callback (from its state before, from).
func (o *outbox) entry(from lifecycle.JobState, d *jobDoc, ver int64, joint bool, now time.Time) (storage.Write, bool, error) {
	if o == nil || d.Callback == "" || !callbackFinal(d.Status) || callbackFinal(from) {
		return storage.Write{}, false, nil
	}
	key, err := callbackKey(d.JobID)
	if err != nil {
		return storage.Write{}, false, err
	}
	e := callbackEntry{Meta: lifecycle.Meta{Version: 1}, JobID: d.JobID, TenantID: d.TenantID, URL: d.Callback, JobVersion: ver,
		Joint: joint, Body: bodyOf(&d.Job), WrittenAt: now.UTC()}
	b, err := jsonenc.Marshal(&e)
	if err != nil {
		return storage.Write{}, false, err
	}
	// Unconditional: a newer end of the job (requeued and ended again)
	// replaces an entry not yet sent; the sender's writes are conditional.
	return storage.Write{Key: key, Value: b}, true, nil
}

// signal wakes a waiter: wait returns a channel closed by the next fire.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// callbackHosts is Config.CallbackHosts: the hosts a callback may name,
// lower case; empty allows any.
type callbackHosts []string

// allow refuses a callback URL whose host is not listed (INVALID_INPUT).
func (h callbackHosts) allow(callback string) error {
	if callback == "" || len(h) == 0 {
		return nil
	}
	u, err := url.Parse(callback)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return badJob("callback %q is not an http(s) URL", callback)
	}
	if !slices.Contains(h, strings.ToLower(u.Hostname())) {
		return badJob("callback host %q is not one of Config.CallbackHosts", u.Hostname())
	}
	return nil
}

// fillCallbacks checks the callback fields of cfg and fills in their
// defaults.
func fillCallbacks(cfg *Config) error {
	if cfg.CallbackAttempts == 0 {
		cfg.CallbackAttempts = defaultCallbackAttempts
	}
	if cfg.CallbackBackoff == 0 {
		cfg.CallbackBackoff = defaultCallbackBackoff
	}
	if cfg.CallbackTimeout == 0 {
		cfg.CallbackTimeout = defaultCallbackTimeout
	}
	if cfg.CallbackAttempts < 1 || cfg.CallbackBackoff < 0 || cfg.CallbackTimeout < 0 {
		return fmt.Errorf("%w: CallbackAttempts %d < 1, or a negative CallbackBackoff %s or CallbackTimeout %s",
			ErrInvalidConfig, cfg.CallbackAttempts, cfg.CallbackBackoff, cfg.CallbackTimeout)
	}
	// A redirect could lead past CallbackHosts: not followed, so a 3xx is
	// a failed attempt. The caller's client is copied, not changed.
	c := &http.Client{}
	if cfg.CallbackClient != nil {
		c = new(*cfg.CallbackClient)
	}
	if c.CheckRedirect == nil {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	cfg.CallbackClient = c
	hosts := make([]string, 0, len(cfg.CallbackHosts))
	for _, h := range cfg.CallbackHosts {
		if _, _, err := net.SplitHostPort(h); err == nil || h == "" || strings.ContainsAny(h, "/@[] ") {
			return fmt.Errorf("%w: CallbackHosts: %q is not a host name", ErrInvalidConfig, h)
		}
		hosts = append(hosts, strings.ToLower(h))
	}
	cfg.CallbackHosts = hosts
	return nil
}

// withCallback is the writes to join to a job's write: joint's (nil: none),
// then, on a store that commits, the outbox entry when the write ends a
// job with a callback (from: its state before), so the two land together.
// n points at how many of the writes are joint's, once they are made.
func (q *jobStore) withCallback(joint func(d *jobDoc) ([]storage.Write, error), from *lifecycle.JobState) (must func(d *jobDoc) ([]storage.Write, error), n *int) {
	n = new(int)
	if q.outbox == nil || !q.store.CanCommit() {
		*n = int(^uint(0) >> 1)
		return joint, n
	}
	return func(d *jobDoc) ([]storage.Write, error) {
		var ws []storage.Write
		if joint != nil {
			var err error
			if ws, err = joint(d); err != nil {
				return nil, err
			}
		}
		*n = len(ws)
		e, ok, err := q.outbox.entry(*from, d, d.Version, true, q.clock.Now())
		if err != nil || !ok {
			return ws, err
		}
		return append(ws, e), nil
	}, n
}

// callbackBefore writes the outbox entry of a job this change ends, on a
// store that cannot commit: before the job's write, so a crash between
// the two leaves an entry (for a job that may not have ended: the sender
// reads the job first) rather than an ended job whose callback is lost.
func (q *jobStore) callbackBefore(ctx context.Context, from lifecycle.JobState, d *jobDoc, now time.Time) error {
	if q.outbox == nil || q.store.CanCommit() {
		return nil
	}
	// The write about to be made gives the record the next version.
	e, ok, err := q.outbox.entry(from, d, d.Version+1, false, now)
	if err != nil || !ok {
		return err
	}
	_, err = q.store.Put(ctx, e.Key, e.Value, e.Cond)
	return err
}
