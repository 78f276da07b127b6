package jobqueue

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/audit"
	"github.com/runconveyor/conveyor/internal/deadline"
	"github.com/runconveyor/conveyor/internal/fence"
	"github.com/runconveyor/conveyor/internal/hookpost"
	"github.com/runconveyor/conveyor/internal/jsonenc"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// callbackParallel bounds the callbacks one sender posts at once.
const callbackParallel = 8

// callbackSender posts the outbox's entries: a Worker runs one. Each entry
// is taken under a lease of its own, through the fenced-write core, so the
// senders of several processes post an entry once between them (at least
// once: a sender that overruns its lease may post it again).
type callbackSender struct {
	store    *storage.Store
	clock    clock.Clock
	log      *slog.Logger
	jobs     *jobStore
	outbox   *outbox
	units    *deadline.Units
	client   *http.Client
	hosts    callbackHosts
	node     string
	attempts int
	backoff  time.Duration
	timeout  time.Duration
	pending  time.Duration // the wait before an entry whose job's write is not seen yet is read again

	// passing is held by the one pass under way of the Workers sharing
	// this Queue; it guards due.
	passing sync.Mutex
	// due is when each entry seen is next due, so a pass does not read
	// an entry before then (an entry written here since is read at once;
	// one another process wrote anew, at the time known).
	due map[string]time.Time
	// listed is when a pass last listed the outbox; guarded by passing.
	listed time.Time
}

// errNotNow: an entry is not due, or another sender holds it, until at.
type errNotNow struct{ at time.Time }

func (e *errNotNow) Error() string { return "callback not due until " + e.at.String() }

// run sends the outbox's entries as owner until ctx ends: at once when
// this process writes one, when an entry's next attempt is due, and at
// least every period (an entry left by a process that died).
func (s *callbackSender) run(ctx context.Context, owner string, period time.Duration) {
	for {
		wake := s.outbox.wake.wait()
		next := s.pass(ctx, owner, period)
		wait := period
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(s.clock.Now()), 0))
		}
		if !sleep(ctx, s.clock, wait, wake) {
			return
		}
	}
}

// pass lists the outbox (its cost is the callbacks pending) and handles
// each entry due; it returns when the next one is due (zero: none known).
// While another Worker of this Queue makes a pass, it returns at once
// (zero): that pass lists the outbox for both, and its Worker passes
// again at the next wake or due entry, so the outbox is not listed once
// per Worker at each wake.
//
// A pass woken by this process's own writes, with no entry due and the
// last listing younger than period, handles those entries only: while a
// receiver is down and entries wait out their backoff, each job's end
// does not list the whole backlog again.
func (s *callbackSender) pass(ctx context.Context, owner string, period time.Duration) (next time.Time) {
	if !s.passing.TryLock() {
		return time.Time{}
	}
	defer s.passing.Unlock()
	now, fresh := s.clock.Now(), s.outbox.takeWritten()
	var keys []string
	full := s.listed.IsZero() || now.Sub(s.listed) >= period || s.anyDue(now)
	if full {
		for key, err := range s.store.List(ctx, callbacksPrefix) {
			if err != nil {
				if ctx.Err() == nil {
					s.log.WarnContext(ctx, "jobqueue: callback outbox listing failed", "err", err)
				}
				s.outbox.putBack(fresh)
				return s.clock.Now().Add(s.backoff)
			}
			keys = append(keys, key)
		}
		s.listed = now
	} else {
		keys = slices.Sorted(maps.Keys(fresh))
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, callbackParallel)
		due = make(map[string]time.Time, len(keys))
	)
	if !full {
		// The entries not looked at keep their times.
		for key, at := range s.due {
			if !fresh[key] {
				due[key] = at
				if next.IsZero() || at.Before(next) {
					next = at
				}
			}
		}
	}
	for _, key := range keys {
		if at, ok := s.due[key]; ok && now.Before(at) && !fresh[key] {
			mu.Lock() // the posts started above write due and next too
			due[key] = at
			if next.IsZero() || at.Before(next) {
				next = at
			}
			mu.Unlock()
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			at := s.one(ctx, key, owner)
			mu.Lock()
			if !at.IsZero() {
				due[key] = at
				if next.IsZero() || at.Before(next) {
					next = at
				}
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	s.due = due
	return next
}

// anyDue tells whether an entry seen is due at now; passing held.
func (s *callbackSender) anyDue(now time.Time) bool {
	for _, at := range s.due {
		if !now.Before(at) {
			return true
		}
	}
	return false
}

// one handles the entry at key: it takes the entry's lease, posts the
// callback, and deletes the entry after a 2xx answer or the last
// attempt (recording the failure), else writes when to try again. It
// returns when the entry is next due (zero: done with it).
func (s *callbackSender) one(ctx context.Context, key, owner string) time.Time {
	now := s.clock.Now().UTC()
	rec := &fence.Record[callbackEntry, *callbackEntry]{Store: s.store, Key: key, Lease: entryLease}
	_, e, err := rec.Apply(ctx, func(e *callbackEntry) error {
		switch {
		case records.LeaseLive(&e.Lease, now) && e.Lease.Owner != owner:
			return &errNotNow{at: e.Lease.ExpiresAt}
		case now.Before(e.NextAt):
			return &errNotNow{at: e.NextAt}
		}
		e.Lease = lifecycle.Lease{Owner: owner, Epoch: e.Lease.Epoch + 1, ExpiresAt: now.Add(2 * s.timeout)}
		return nil
	})
	if nn, ok := errors.AsType[*errNotNow](err); ok {
		return nn.at
	}
	if err = s.jobs.quar.poison(ctx, err); errors.Is(err, storage.ErrNotFound) {
		return time.Time{} // sent by another, or poison now in quarantine
	}
	if err != nil {
		s.warn(ctx, key, "take", err)
		return now.Add(s.backoff)
	}
	_, ver := rec.Snapshot()
	body, ok, retry := s.bodyFor(ctx, &e, now)
	switch {
	case !retry.IsZero():
		return s.again(ctx, rec, owner, &e, ver, retry, "", false)
	case !ok:
		s.drop(ctx, key, ver)
		return time.Time{}
	}
	if err := s.hosts.allow(e.URL); err != nil {
		s.gaveUp(ctx, &e, body, err)
		s.drop(ctx, key, ver)
		return time.Time{}
	}
	if err = s.post(ctx, e.URL, body); err == nil {
		s.drop(ctx, key, ver)
		return time.Time{}
	}
	if ctx.Err() != nil {
		return time.Time{} // stopping: the lease lapses and the attempt is made again
	}
	if e.Attempts+1 >= s.attempts {
		s.gaveUp(ctx, &e, body, err)
		s.drop(ctx, key, ver)
		return time.Time{}
	}
	return s.again(ctx, rec, owner, &e, ver, now.Add(s.waitAfter(e.Attempts)), err.Error(), true)
}

// callbackMaxWait caps the doubling wait between two attempts.
const callbackMaxWait = 24 * time.Hour

// waitAfter is the wait after a failed attempt that attempts failed ones
// came before: CallbackBackoff doubled each time, at most a day (or
// CallbackBackoff, when longer), so many attempts of a long backoff do not
// overflow into a negative wait (an attempt at every pass).
func (s *callbackSender) waitAfter(attempts int) time.Duration {
	shift := min(attempts, 30)
	wait := s.backoff << shift
	if wait>>shift != s.backoff || wait > callbackMaxWait {
		return max(callbackMaxWait, s.backoff)
	}
	return wait
}

func entryLease(e *callbackEntry) *lifecycle.Lease { return &e.Lease }

// bodyFor is the body to post for e: its own, when it was written in the
// commit of the job's end; else the job's as read, once the job's write
// that the entry came before is seen to have landed. ok false: drop the
// entry (the write lost its race, the job was requeued and will write an
// entry of its own when it ends, or the job is gone: on a store that
// settles, read missing again Settle later, as one not-found may be false
// there). retry set: the write is not seen yet; read it again then.
func (s *callbackSender) bodyFor(ctx context.Context, e *callbackEntry, now time.Time) (body CallbackBody, ok bool, retry time.Time) {
	if e.Joint {
		return e.Body, true, time.Time{}
	}
	d, _, err := s.jobs.read(ctx, e.JobID)
	switch {
	case errors.Is(err, storage.ErrNotFound) && s.jobs.gone(e.JobID, err):
		return body, false, time.Time{}
	case errors.Is(err, storage.ErrNotFound):
		return body, false, now.Add(s.jobs.absent.Settle)
	case err != nil:
		s.warn(ctx, e.JobID, "read job", err)
		return body, false, now.Add(s.backoff)
	case d.Version < e.JobVersion && now.Sub(e.WrittenAt) < callbackPending:
		return body, false, now.Add(s.pending)
	case d.Version < e.JobVersion || !callbackFinal(d.Status):
		return body, false, time.Time{}
	}
	return bodyOf(&d.Job), true, time.Time{}
}

// again writes the entry back, its lease given up, due at next: after a
// failed attempt (counted), or to look at its job again.
func (s *callbackSender) again(ctx context.Context, rec *fence.Record[callbackEntry, *callbackEntry], owner string, e *callbackEntry, ver storage.Version, next time.Time, lastErr string, counted bool) time.Time {
	f := &fence.Record[callbackEntry, *callbackEntry]{Store: s.store, Key: rec.Key, Lease: entryLease, Owner: owner, Epoch: e.Lease.Epoch}
	f.Seed(*e, ver)
	_, _, err := f.Apply(ctx, func(e *callbackEntry) error {
		if counted {
			e.Attempts++
			e.LastError = lastErr
		}
		e.NextAt = next.UTC()
		e.Lease = lifecycle.Lease{Epoch: e.Lease.Epoch, ExpiresAt: s.clock.Now().UTC()}
		return nil
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, lifecycle.ErrLeaseLost) {
		s.warn(ctx, rec.Key, "write back", err)
	}
	return next
}

// drop deletes the entry, unless it changed since (a newer end of its job
// wrote it anew).
func (s *callbackSender) drop(ctx context.Context, key string, ver storage.Version) {
	err := s.store.Delete(ctx, key, storage.IfMatch(ver))
	if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) && !errors.Is(err, storage.ErrNotFound) && ctx.Err() == nil {
		s.warn(ctx, key, "delete", err)
	}
}

// post makes one attempt: one unit of the core under the timeout; a 2xx
// answer is delivery, and a redirect is not followed (the default client).
func (s *callbackSender) post(ctx context.Context, target string, body CallbackBody) error {
	b, err := jsonenc.Marshal(&body)
	if err != nil {
		return err
	}
	return hookpost.Post(ctx, s.units, "job "+body.JobID+" callback", s.timeout, s.client, target, b)
}

// callbackFailedEvent is the audit event of a callback given up.
const callbackFailedEvent = "job.callback.failed"

// gaveUp records a callback given up: a job.callback.failed event of the
// job in the audit log (its error and attempts in the context's metadata)
// and a WARN line. The job itself is not written: its end stands, and a
// write would race a requeue.
func (s *callbackSender) gaveUp(ctx context.Context, e *callbackEntry, body CallbackBody, cause error) {
	attempts := strconv.Itoa(e.Attempts + 1)
	s.log.WarnContext(ctx, "callback_failed", "job_id", e.JobID, "attempts", attempts, "err", cause)
	now := s.clock.Now().UTC()
	tc, err := jsonenc.Marshal(&lifecycle.TransitionContext{Metadata: map[string]string{metaError: cause.Error(), "attempts": attempts}})
	if err != nil {
		return
	}
	ev := lifecycle.AuditEvent{TS: now, Event: callbackFailedEvent, Actor: string(systemActor), JobID: e.JobID,
		TenantID: e.TenantID, From: string(body.Status), To: string(body.Status), Node: s.node, Context: tc}
	key, err := layout.AuditKey(now, records.AuditEventID(now, e.JobID, e.JobVersion, 1))
	if err == nil {
		var b []byte
		if b, err = jsonenc.Marshal(&ev); err == nil {
			err = audit.Put(ctx, s.store, key, b)
		}
	}
	if err != nil {
		s.warn(ctx, e.JobID, "audit", err)
	}
}

func (s *callbackSender) warn(ctx context.Context, subject, what string, err error) {
	s.log.WarnContext(ctx, "jobqueue: callback "+what+" failed", "key", subject, "err", err)
}
