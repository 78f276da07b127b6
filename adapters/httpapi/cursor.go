package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// A page's cursor on the wire is the SDK's position, a dot, and a MAC of
// that position and of the list it belongs to (route and filters), so a
// cursor no page of that list handed out is refused: one made by hand, one
// altered, one of another list (docs/http-api.md, "Paged lists").
const (
	// cursorMACLen is the MAC's length: HMAC-SHA256 cut to 128 bits.
	cursorMACLen = 16
	// minCursorKeyLen is the shortest Config.CursorKey accepted.
	minCursorKeyLen = 16
	// cursorKeyRecheck is how long a key read from the store is trusted
	// before a cursor it refuses makes the Server read it again (another
	// Worker may have created the stored key while a store answered this
	// one wrongly, or an operator replaced it).
	cursorKeyRecheck = time.Minute
)

// cursorKeyRecord is the stored key every Server on a store signs with.
type cursorKeyRecord struct {
	Key       []byte    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}

// cursors signs and checks the cursors of the paged lists.
type cursors struct {
	store *storage.Store // nil: the key is this Server's own
	clock clock.Clock

	mu       sync.Mutex
	key      []byte
	fixed    bool // Config.CursorKey: never read again
	loadedAt time.Time
}

func newCursors(key []byte, store *storage.Store, c clock.Clock) (*cursors, error) {
	cs := &cursors{store: store, clock: c}
	switch {
	case key != nil && len(key) < minCursorKeyLen:
		return nil, fmt.Errorf("%w: CursorKey has %d bytes, want at least %d", ErrInvalidConfig, len(key), minCursorKeyLen)
	case key != nil:
		cs.key, cs.fixed = append([]byte(nil), key...), true
	case store == nil:
		cs.key, cs.fixed = randomKey(), true
	}
	return cs, nil
}

func randomKey() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}

// listOf names the list a request reads: its path and its filters (every
// query parameter but cursor and limit, empty ones left out, in sorted
// order), so a page's cursor is good for the pages of that list only.
func listOf(u *url.URL) string {
	q := u.Query()
	for k, vs := range q {
		if k == "cursor" || k == "limit" || len(vs) == 0 || (len(vs) == 1 && vs[0] == "") {
			delete(q, k)
		}
	}
	return u.Path + "?" + q.Encode()
}

func mac(key []byte, list, pos string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("conveyor cursor v1\x00"))
	h.Write([]byte(list))
	h.Write([]byte{0})
	h.Write([]byte(pos))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:cursorMACLen])
}

// seal is the cursor of the SDK's position pos in list.
func (c *cursors) seal(ctx context.Context, list, pos string) (string, error) {
	key, err := c.current(ctx, false)
	if err != nil {
		return "", err
	}
	return pos + "." + mac(key, list, pos), nil
}

// open returns the SDK's position of a cursor of list ("" for none), or
// INVALID_CURSOR for a cursor that no page of list handed out.
func (c *cursors) open(ctx context.Context, list, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	pos, sum, ok := strings.Cut(cursor, ".")
	if !ok || pos == "" || len(sum) != base64.RawURLEncoding.EncodedLen(cursorMACLen) {
		return "", errBadCursor
	}
	for _, reread := range []bool{false, true} {
		key, err := c.current(ctx, reread)
		if err != nil {
			return "", err
		}
		if key == nil {
			break
		}
		if hmac.Equal([]byte(sum), []byte(mac(key, list, pos))) {
			return pos, nil
		}
	}
	return "", errBadCursor
}

var errBadCursor = apiErr(codes.InvalidCursor, "invalid cursor: not one a page of this list handed out")

// current returns the key, reading the store's on first use (creating it
// if there is none yet). reread asks for the store's again, which is done
// once per cursorKeyRecheck at most; nil then means there is no other key
// to try.
func (c *cursors) current(ctx context.Context, reread bool) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key != nil && (!reread || c.fixed || c.clock.Now().Sub(c.loadedAt) < cursorKeyRecheck) {
		if reread {
			return nil, nil
		}
		return c.key, nil
	}
	key, err := loadCursorKey(ctx, c.store, c.clock.Now())
	if err != nil {
		return nil, err
	}
	c.key, c.loadedAt = key, c.clock.Now()
	return key, nil
}

// loadCursorKey reads the store's cursor key, creating it (create-only)
// when there is none: every Server on the store ends up with the one the
// store holds.
func loadCursorKey(ctx context.Context, s *storage.Store, now time.Time) ([]byte, error) {
	for range 3 {
		raw, _, err := s.Get(ctx, layout.CursorKeyKey)
		if err == nil {
			var rec cursorKeyRecord
			if err := json.Unmarshal(raw, &rec); err != nil || len(rec.Key) < minCursorKeyLen {
				return nil, fmt.Errorf("httpapi: the cursor key at %s is not a key (replace or delete it): %v", layout.CursorKeyKey, err)
			}
			return rec.Key, nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return nil, err
		}
		raw, err = json.Marshal(cursorKeyRecord{Key: randomKey(), CreatedAt: now.UTC()})
		if err != nil {
			return nil, err
		}
		// Written or not (another Server won the race), the key is what
		// the store holds: read it again.
		if _, err := s.Put(ctx, layout.CursorKeyKey, raw, storage.IfNotExists()); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("httpapi: the cursor key at %s was not found after it was written", layout.CursorKeyKey)
}
