// Package probe checks, when a program starts, that its Store keeps the
// promises the engines rest on: a create-only write over an existing key
// fails, a compare-and-swap with a stale version fails, one on a missing key
// fails, conditional deletes refuse a stale version, and what was written
// reads back. A store that loses them (a server that ignores conditional
// headers, a proxy that drops them) would otherwise start and then run a
// duplicate submit twice. The probe writes a few keys under a folder of its
// own (under probe/), unique to one start, and removes it afterwards,
// whatever the outcome; a folder a killed start left is removed by a later
// start once it is an hour old.
//
// The probe is a handful of requests (a few milliseconds on a directory or
// in memory): it proves the single-request semantics, not behaviour under
// concurrency, which the conformance suite (package storage/storetest, and
// the conveyor command's conformance check) proves on any store.
package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// The checks, by the names a failure gives.
const (
	// ReadAfterWrite: a created key reads back with its bytes and version,
	// a compare-and-swap with the current version succeeds and reads back,
	// the key is listed, and once deleted it reads as missing.
	ReadAfterWrite = "read-after-write"
	// CreateOverExisting: a create-only Put over an existing key fails with
	// a precondition failure and leaves the key as it was.
	CreateOverExisting = "create-only over an existing key"
	// StaleIfMatch: a Put IfMatch(a version the key no longer holds) fails
	// with a precondition failure and leaves the key as it was.
	StaleIfMatch = "if-match with a stale version"
	// IfMatchMissing: a Put IfMatch on a missing key fails with a
	// precondition failure (never not-found, as storage.Store says) and
	// creates nothing.
	IfMatchMissing = "if-match on a missing key"
	// DeleteConditions: a Delete IfMatch(stale) fails and keeps the key; a
	// Delete IfMatch(current) deletes it; a Delete IfMatch on a missing key
	// fails. Checked one request at a time, as every adapter documents it
	// (s3store on MinIO checks with a HEAD first, see storage.Store).
	DeleteConditions = "conditional delete"
)

// ErrFailed is matched by every *Failure: the store answered, and broke a
// promise.
var ErrFailed = errors.New("probe: the store failed a semantics check")

// Failure is one check the store failed.
type Failure struct {
	Check string // one of the check names above
	Want  string // what the contract says
	Got   string // what the store did
}

// Error names the check, what was wanted and what the store did.
func (f *Failure) Error() string {
	return fmt.Sprintf("store semantics check %q failed: want %s, got %s", f.Check, f.Want, f.Got)
}

// Is makes a Failure match ErrFailed.
func (f *Failure) Is(target error) bool { return target == ErrFailed }

// Config tunes Run. The zero value is ready to use.
type Config struct {
	// Timeout bounds the checks, and separately the removal of the
	// probe's keys; a store's transient failures are retried within it.
	// Zero: 30 s.
	Timeout time.Duration
	// Now names the probe's folder and dates others' leftovers. Nil:
	// time.Now.
	Now func() time.Time
}

// StaleAfter is the age past which a probe folder another start left (it
// was killed before it removed it) is removed.
const StaleAfter = time.Hour

// folderTime is the layout of a folder name's time.
const folderTime = "20060102T150405Z"

// Run probes s and removes what it wrote. It returns nil when every check
// held; when checks failed, an error matching ErrFailed that joins one
// *Failure per failed check; and any other error when the store could not
// be probed (no answer, access denied) or its keys not removed.
func Run(ctx context.Context, s *storage.Store, cfg Config) error {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	now := cfg.Now().UTC()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	folder := now.Format(folderTime) + "-" + hex.EncodeToString(rnd[:])
	// Patient: a transient failure (a SQLite file whose write lock other
	// processes held past its BusyTimeout, a 503) is retried within the
	// checks' Timeout, as the engines retry theirs, rather than refusing
	// the start. A retried write that then fails its condition may have
	// landed the first time: that is reported as an unknown outcome (the
	// check could not run), never as a broken promise.
	p := &prober{s: s.Patient(storage.Retry{Clock: clock.Real()}), prefix: layout.ProbePrefix + folder + "/", tag: folder}

	checkCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	checks := []struct {
		name string
		fn   func(context.Context) error
	}{
		{ReadAfterWrite, p.readAfterWrite},
		{CreateOverExisting, p.createOverExisting},
		{StaleIfMatch, p.staleIfMatch},
		{IfMatchMissing, p.ifMatchMissing},
		{DeleteConditions, p.deleteConditions},
	}
	// The checks touch keys of their own: run together, they cost the
	// time of the longest (a store's group commit shares their syncs).
	errs := make([]error, len(checks), len(checks)+1)
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			err := c.fn(checkCtx)
			if err != nil && !errors.Is(err, ErrFailed) {
				err = fmt.Errorf("store semantics check %q could not run: %w", c.name, err)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	cancel()
	// The probe's keys go even when ctx is done: they are the probe's
	// mess, not the caller's.
	cleanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeout)
	defer cancel()
	if err := p.cleanup(cleanCtx, now); err != nil {
		errs = append(errs, fmt.Errorf("removing the store semantics probe's keys under %s: %w", p.prefix, err))
	}
	return errors.Join(errs...)
}

// prober is one start's probe: its folder, and the keys it wrote there.
type prober struct {
	s      *storage.Store
	prefix string
	tag    string // the folder's name, in every value so values differ between starts

	mu      sync.Mutex
	written []string
}

func (p *prober) key(name string) string { return p.prefix + name }

func (p *prober) value(v string) []byte { return []byte(v + " " + p.tag) }

// put writes and records the key for cleanup, whatever the outcome.
func (p *prober) put(ctx context.Context, key, value string, cond storage.Condition) (storage.Version, error) {
	p.mu.Lock()
	p.written = append(p.written, key)
	p.mu.Unlock()
	return p.s.Put(ctx, key, p.value(value), cond)
}

// mustPut is a write the check needs to go through: a precondition
// failure here is a broken promise too.
func (p *prober) mustPut(ctx context.Context, check, what, key, value string, cond storage.Condition) (storage.Version, error) {
	v, err := p.put(ctx, key, value, cond)
	switch {
	case errors.Is(err, storage.ErrPreconditionFailed), errors.Is(err, storage.ErrNotFound):
		return "", &Failure{check, what + " to succeed", err.Error()}
	case err != nil:
		return "", err
	case v == "":
		return "", &Failure{check, what + " to return a version", "an empty version"}
	}
	return v, nil
}

// refused reports whether err is the precondition failure a write with a
// condition that does not hold must give: nil when it is, a *Failure when
// the store did something else, err itself when the store failed.
func refused(check, what string, err error) error {
	switch {
	case err == nil:
		return &Failure{check, what + " to fail its condition", "success"}
	case errors.Is(err, storage.ErrPreconditionFailed):
		return nil
	case errors.Is(err, storage.ErrNotFound):
		return &Failure{check, what + " to fail its condition", "not found (the contract says precondition failed)"}
	}
	return err
}

// holds reads key and compares it with value at version ("" for any).
func (p *prober) holds(ctx context.Context, check, key, value string, version storage.Version) error {
	b, v, err := p.s.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return &Failure{check, fmt.Sprintf("%s to hold %q", key, p.value(value)), "not found"}
	case err != nil:
		return err
	case string(b) != string(p.value(value)):
		return &Failure{check, fmt.Sprintf("%s to hold %q", key, p.value(value)), fmt.Sprintf("%q", b)}
	case version != "" && v != version:
		return &Failure{check, fmt.Sprintf("%s at version %q", key, version), fmt.Sprintf("version %q", v)}
	}
	return nil
}

// missing reads key and wants not found.
func (p *prober) missing(ctx context.Context, check, key string) error {
	b, _, err := p.s.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	return &Failure{check, key + " to be missing", fmt.Sprintf("it holds %q", b)}
}

func (p *prober) readAfterWrite(ctx context.Context) error {
	const c = ReadAfterWrite
	key := p.key("read-after-write")
	v1, err := p.mustPut(ctx, c, "a create-only Put of a new key", key, "first", storage.IfNotExists())
	if err != nil {
		return err
	}
	if err := p.holds(ctx, c, key, "first", v1); err != nil {
		return err
	}
	v2, err := p.mustPut(ctx, c, "a compare-and-swap with the current version", key, "second", storage.IfMatch(v1))
	if err != nil {
		return err
	}
	if v2 == v1 {
		return &Failure{c, "new bytes to get a new version", fmt.Sprintf("the version %q again", v1)}
	}
	if err := p.holds(ctx, c, key, "second", v2); err != nil {
		return err
	}
	listed := false
	for k, err := range p.s.List(ctx, p.prefix) {
		if err != nil {
			return err
		}
		listed = listed || k == key
	}
	if !listed {
		return &Failure{c, "List(" + p.prefix + ") to yield " + key, "a listing without it"}
	}
	if err := p.s.Delete(ctx, key, storage.Condition{}); err != nil {
		return err
	}
	return p.missing(ctx, c, key)
}

func (p *prober) createOverExisting(ctx context.Context) error {
	const c = CreateOverExisting
	key := p.key("create-over-existing")
	v, err := p.mustPut(ctx, c, "an unconditional Put", key, "first", storage.Condition{})
	if err != nil {
		return err
	}
	_, err = p.put(ctx, key, "second", storage.IfNotExists())
	if err := refused(c, "a create-only Put over an existing key", err); err != nil {
		return err
	}
	return p.holds(ctx, c, key, "first", v)
}

func (p *prober) staleIfMatch(ctx context.Context) error {
	const c = StaleIfMatch
	key := p.key("stale-if-match")
	v1, v2, err := p.secondVersion(ctx, c, key)
	if err != nil {
		return err
	}
	_, err = p.put(ctx, key, "third", storage.IfMatch(v1))
	if err := refused(c, "a Put IfMatch(a replaced version)", err); err != nil {
		return err
	}
	return p.holds(ctx, c, key, "second", v2)
}

// secondVersion writes key "first", then swaps it for "second": the
// versions of both, so a check can use the replaced one.
func (p *prober) secondVersion(ctx context.Context, c, key string) (v1, v2 storage.Version, err error) {
	if v1, err = p.mustPut(ctx, c, "an unconditional Put", key, "first", storage.Condition{}); err != nil {
		return "", "", err
	}
	v2, err = p.mustPut(ctx, c, "a compare-and-swap with the current version", key, "second", storage.IfMatch(v1))
	return v1, v2, err
}

func (p *prober) ifMatchMissing(ctx context.Context) error {
	const c = IfMatchMissing
	// A well-formed version, of another key.
	other, err := p.mustPut(ctx, c, "an unconditional Put", p.key("if-match-missing-other"), "other", storage.Condition{})
	if err != nil {
		return err
	}
	key := p.key("if-match-missing")
	_, err = p.put(ctx, key, "first", storage.IfMatch(other))
	if err := refused(c, "a Put IfMatch on a missing key", err); err != nil {
		return err
	}
	return p.missing(ctx, c, key)
}

func (p *prober) deleteConditions(ctx context.Context) error {
	const c = DeleteConditions
	key := p.key("conditional-delete")
	v1, v2, err := p.secondVersion(ctx, c, key)
	if err != nil {
		return err
	}
	err = p.s.Delete(ctx, key, storage.IfMatch(v1))
	if err := refused(c, "a Delete IfMatch(a replaced version)", err); err != nil {
		return err
	}
	if err := p.holds(ctx, c, key, "second", v2); err != nil {
		return err
	}
	if err := p.s.Delete(ctx, key, storage.IfMatch(v2)); errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrNotFound) {
		return &Failure{c, "a Delete IfMatch(the current version) to succeed", err.Error()}
	} else if err != nil {
		return err
	}
	if err := p.missing(ctx, c, key); err != nil {
		return err
	}
	err = p.s.Delete(ctx, key, storage.IfMatch(v2))
	return refused(c, "a Delete IfMatch on a missing key", err)
}

// cleanup deletes the keys this probe wrote, and those of probe folders
// older than StaleAfter (starts killed mid-probe), in one listing of the
// probe prefix; a listing that fails still leaves this probe's own keys
// deleted.
func (p *prober) cleanup(ctx context.Context, now time.Time) error {
	doomed := map[string]bool{}
	p.mu.Lock()
	for _, k := range p.written {
		doomed[k] = true
	}
	p.mu.Unlock()
	var errs []error
	for k, err := range p.s.List(ctx, layout.ProbePrefix) {
		if err != nil {
			errs = append(errs, err)
			break
		}
		if strings.HasPrefix(k, p.prefix) || stale(k, now) {
			doomed[k] = true
		}
	}
	for k := range doomed {
		if err := p.s.Delete(ctx, k, storage.Condition{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stale reports whether key lies in a probe folder named for a time more
// than StaleAfter before now. Keys of folders with other names stay.
func stale(key string, now time.Time) bool {
	folder, _, ok := strings.Cut(strings.TrimPrefix(key, layout.ProbePrefix), "/")
	if !ok {
		return false
	}
	stamp, _, _ := strings.Cut(folder, "-")
	t, err := time.Parse(folderTime, stamp)
	return err == nil && now.Sub(t) > StaleAfter
}
