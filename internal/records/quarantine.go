package records

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// QuarantinePrefix holds poison records, each under
// quarantine/{original key}/{stamp}.json, never deleted by the SDK.
const QuarantinePrefix = "quarantine/"

// Quarantined is one record in quarantine as it is stored: the original
// key and bytes, why and when it was moved. Data is base64 in the JSON, so
// bytes that are not valid JSON or UTF-8 survive as they were. (The HTTP
// API answers with lifecycle.Quarantined, which also names its QKey.)
type Quarantined struct {
	// QKey is where the record is kept now (not part of the JSON).
	QKey          string    `json:"-"`
	Key           string    `json:"key"`
	Reason        string    `json:"reason"`
	QuarantinedAt time.Time `json:"quarantined_at"`
	Data          []byte    `json:"data"`
}

// maxReason bounds the reason kept with a quarantined record.
const maxReason = 4096

// quarantineRace is how long a quarantine copy of one version of a record
// counts as another process's quarantine in progress, not an old one.
const quarantineRace = time.Minute

// Quarantine moves the poison record described by ce out of the way (one
// with a QKey was moved already: Quarantine returns that QKey): it
// writes a Quarantined copy and then retires the original if it still has
// the version ce was read at. When the record changed meanwhile (a writer
// repaired it), the copy stays as evidence, the original is left alone and
// the error matches storage.ErrPreconditionFailed. It returns where the copy is.
//
// The original is retired in two steps, because a conditional Delete is
// not atomic on every store (MinIO checks, then deletes): first a
// compare-and-swap Put replaces the poison version with a tombstone, then
// the tombstone is deleted. A repair conditioned on the poison version
// either lands before the swap (which then fails) or is refused; a create
// is refused while the tombstone stands; nobody but Quarantine writes on a
// tombstone, so the non-atomic delete can remove nothing else. A tombstone
// whose delete did not happen (a crash) reads as a corrupt record like any
// other, and the next Quarantine of it, or a Restore, clears it.
//
// The copy's name is derived from the version read, and written
// create-only, so of several processes that read the same poison version at
// once exactly one goes on: the others find its fresh copy and return.
func Quarantine(ctx context.Context, s *storage.Store, ce *lifecycle.QuarantinedError, now time.Time) (string, error) {
	if ce.QKey != "" {
		return ce.QKey, nil // the error of a record already moved: nothing left to move
	}
	if t, ok := readTombstone(ce.Data); ok && ce.Version != "" {
		// A quarantine that swapped in its tombstone but did not delete it.
		if err := s.Delete(ctx, ce.Key, storage.IfMatch(storage.Version(ce.Version))); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			return t.QKey, err
		}
		return t.QKey, nil
	}
	reason := ce.Reason
	if ce.Err != nil {
		reason += ": " + trimPrefix(ce.Err.Error())
	}
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "")
	}
	q := Quarantined{Key: ce.Key, Reason: reason, QuarantinedAt: now.UTC(), Data: ce.Data}
	var name string
	if ce.Version != "" {
		sum := sha256.Sum256([]byte(ce.Version))
		name = "v-" + hex.EncodeToString(sum[:12])
	} else {
		name = now.UTC().Format("20060102T150405.000000000Z") + "-" + nonce()
	}
	qkey := QuarantinePrefix + ce.Key + "/" + name + ".json"
	if err := storekey.ValidateKey(qkey); err != nil {
		return "", err
	}
	b, err := json.Marshal(&q)
	if err != nil {
		return "", err
	}
	if _, err := s.Put(ctx, qkey, b, storage.IfNotExists()); errors.Is(err, storage.ErrPreconditionFailed) {
		prev, perr := ReadQuarantined(ctx, s, qkey)
		if perr == nil && now.Sub(prev.QuarantinedAt) < quarantineRace {
			return qkey, nil // another process is quarantining this very version
		}
		// An old copy of the same bytes (S3 versions repeat with the
		// bytes): this is a new quarantine of them.
		if _, err := s.Put(ctx, qkey, b, storage.Condition{}); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	if ce.Version == "" {
		// Read without a version (a foreign tool's file): nothing to
		// condition on.
		return qkey, s.Delete(ctx, ce.Key, storage.Condition{})
	}
	tb, err := json.Marshal(tombstone{QKey: qkey, At: now.UTC(), Nonce: nonce()})
	if err != nil {
		return "", err
	}
	tv, err := s.Put(ctx, ce.Key, tb, storage.IfMatch(storage.Version(ce.Version)))
	if errors.Is(err, storage.ErrOutcomeUnknown) {
		cur, cv, gerr := s.Get(ctx, ce.Key)
		if gerr != nil || string(cur) != string(tb) {
			return qkey, err
		}
		tv, err = cv, nil // the swap landed
	}
	if err != nil {
		return qkey, err
	}
	if err := s.Delete(ctx, ce.Key, storage.IfMatch(tv)); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return qkey, err // the tombstone stays until the next reader or a Restore clears it
	}
	return qkey, nil
}

// tombstone is what a poison record's key holds between the
// compare-and-swap that retires it and the delete that follows.
type tombstone struct {
	QKey string    `json:"conveyor_quarantined"`
	At   time.Time `json:"at"`
	// Nonce makes every tombstone's bytes new, so a store that versions
	// by content never gives two tombstones one version.
	Nonce string `json:"nonce"`
}

func readTombstone(b []byte) (tombstone, bool) {
	var t tombstone
	if len(b) > 1024 || json.Unmarshal(b, &t) != nil || !strings.HasPrefix(t.QKey, QuarantinePrefix) {
		return tombstone{}, false
	}
	return t, true
}

func nonce() string {
	var r [8]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24+).
	return hex.EncodeToString(r[:])
}

// ListQuarantine yields every quarantined record, oldest key first.
func ListQuarantine(ctx context.Context, s *storage.Store) iter.Seq2[Quarantined, error] {
	return func(yield func(Quarantined, error) bool) {
		for key, err := range s.List(ctx, QuarantinePrefix) {
			if err != nil {
				yield(Quarantined{}, err)
				return
			}
			q, err := ReadQuarantined(ctx, s, key)
			if errors.Is(err, storage.ErrNotFound) {
				continue // restored meanwhile
			}
			if !yield(q, err) {
				return
			}
		}
	}
}

// ReadQuarantined reads one quarantined record by its QKey.
func ReadQuarantined(ctx context.Context, s *storage.Store, qkey string) (Quarantined, error) {
	if !strings.HasPrefix(qkey, QuarantinePrefix) {
		return Quarantined{}, fmt.Errorf("storage: %q is not a quarantine key: %w", qkey, storage.ErrInvalidKey)
	}
	b, _, err := s.Get(ctx, qkey)
	if err != nil {
		return Quarantined{}, err
	}
	var q Quarantined
	if err := json.Unmarshal(b, &q); err != nil {
		return Quarantined{}, &lifecycle.QuarantinedError{Key: qkey, Data: b, Reason: "undecodable quarantine record", Err: err}
	}
	q.QKey = qkey
	return q, nil
}

// FindQuarantined looks for a quarantined copy of the record that was at
// key: the first one's QKey and reason, or ok false when there is none (or
// the listing fails: the caller then answers as for a missing record). It
// lists only key's own folder under QuarantinePrefix, never the whole
// quarantine.
func FindQuarantined(ctx context.Context, s *storage.Store, key string) (qkey, reason string, ok bool) {
	for k, err := range s.List(ctx, QuarantinePrefix+key+"/") {
		if err != nil {
			return "", "", false
		}
		if q, err := ReadQuarantined(ctx, s, k); err == nil {
			reason = q.Reason
		}
		return k, reason, true
	}
	return "", "", false
}

// Restore puts a quarantined record's bytes back at its original key
// (create-only: a key that was written since is never overwritten; that
// gives storage.ErrPreconditionFailed) and removes it from quarantine. An operator
// restores a record after repairing what made it poison, or to let the
// engines judge it again. A tombstone left at the key by a quarantine that
// did not finish is cleared first once it is older than a minute; a
// younger one belongs to a quarantine in progress and gives
// storage.ErrPreconditionFailed (try again).
func Restore(ctx context.Context, s *storage.Store, qkey string, data []byte) error {
	q, err := ReadQuarantined(ctx, s, qkey)
	if err != nil {
		return err
	}
	if data == nil {
		data = q.Data
	}
	_, err = s.Put(ctx, q.Key, data, storage.IfNotExists())
	if errors.Is(err, storage.ErrPreconditionFailed) {
		cur, cv, gerr := s.Get(ctx, q.Key)
		if t, ok := readTombstone(cur); gerr == nil && ok && time.Since(t.At) >= quarantineRace {
			if derr := s.Delete(ctx, q.Key, storage.IfMatch(cv)); derr != nil {
				return derr
			}
			_, err = s.Put(ctx, q.Key, data, storage.IfNotExists())
		}
	}
	if err != nil {
		return err
	}
	return s.Delete(ctx, qkey, storage.Condition{})
}

func trimPrefix(s string) string {
	const p = "storage: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
