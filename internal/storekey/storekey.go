// Package storekey is what a valid key and a valid id of a Store are: the
// checks the portable Store runs before any I/O and the engines run on
// every id before it becomes part of a key, their limits, and the errors
// that explain a refusal (matched by storage.ErrInvalidKey and
// storage.ErrInvalidID, which are this package's sentinels).
package storekey

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/runconveyor/conveyor/lifecycle"
)

// The sentinels of a refused key or id; package storage exports them.
var (
	// ErrInvalidKey: the key (or List prefix) breaks the rules of ValidateKey.
	ErrInvalidKey = errors.New("storage: invalid key")
	// ErrInvalidID: an id breaks the rules of ValidateID.
	// It matches lifecycle.ErrInvalidInput too: an id is a caller's input.
	ErrInvalidID error = invalidID{}
)

// MaxKeyLen is the longest key accepted, in bytes. S3 allows 1024; the
// rest is left for an adapter's prefix (s3store's Config.Prefix), so every
// valid key fits every adapter.
const MaxKeyLen = 896

// MaxSegmentLen is the longest "/"-separated segment of a key, in bytes:
// NAME_MAX of common file systems, so filestore can map segments to names.
const MaxSegmentLen = 255

// KeyError explains why a key or prefix was refused. It matches
// ErrInvalidKey with errors.Is.
type KeyError struct {
	Key    string
	Reason string
}

// Error renders the key (quoted, so control characters show) and the reason.
func (e *KeyError) Error() string {
	k := e.Key
	if len(k) > 80 {
		k = k[:80] + "..."
	}
	return "storage: invalid key " + quote(k) + ": " + e.Reason
}

// Unwrap returns ErrInvalidKey.
func (e *KeyError) Unwrap() error { return ErrInvalidKey }

// ValidateKey reports whether key may be stored. A key is a "/"-separated
// path: at most MaxKeyLen bytes of valid UTF-8, no control characters or
// backslashes, no leading or trailing "/", and segments that are non-empty,
// at most MaxSegmentLen bytes, not "." or "..", and not starting with
// ".cnv" (filestore keeps its lock and temporary files under that name, so
// they can never collide with a key). Every adapter calls it before any
// I/O, so no key can escape a directory root or alias another key.
func ValidateKey(key string) error {
	if key == "" {
		return &KeyError{Key: key, Reason: "empty"}
	}
	if len(key) > MaxKeyLen {
		return &KeyError{Key: key, Reason: "longer than " + strconv.Itoa(MaxKeyLen) + " bytes"}
	}
	if err := checkChars(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if err := checkSegment(key, seg); err != nil {
			return err
		}
	}
	return nil
}

// ValidatePrefix reports whether prefix can start a valid key, which is
// what List requires. The empty prefix (list everything) is valid. Every
// complete segment of prefix must be valid; the last, partial one may be
// empty (prefix ends in "/") or the start of a longer name, so it is
// checked for characters only.
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > MaxKeyLen {
		return &KeyError{Key: prefix, Reason: "prefix longer than " + strconv.Itoa(MaxKeyLen) + " bytes"}
	}
	if err := checkChars(prefix); err != nil {
		return err
	}
	segs := strings.Split(prefix, "/")
	for _, seg := range segs[:len(segs)-1] {
		if err := checkSegment(prefix, seg); err != nil {
			return err
		}
	}
	return nil
}

// reservedPrefix starts the names adapters keep for themselves.
const reservedPrefix = ".cnv"

func checkChars(key string) error {
	if !utf8.ValidString(key) {
		return &KeyError{Key: key, Reason: "not valid UTF-8"}
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return &KeyError{Key: key, Reason: "contains a control character"}
		}
		if r == '\\' {
			return &KeyError{Key: key, Reason: `contains a backslash`}
		}
	}
	return nil
}

func checkSegment(key, seg string) error {
	switch {
	case seg == "":
		return &KeyError{Key: key, Reason: "empty path segment (leading, trailing or double slash)"}
	case seg == "." || seg == "..":
		return &KeyError{Key: key, Reason: `"." or ".." path segment`}
	case len(seg) > MaxSegmentLen:
		return &KeyError{Key: key, Reason: "path segment longer than 255 bytes"}
	case strings.HasPrefix(seg, reservedPrefix):
		return &KeyError{Key: key, Reason: "segment starts with the reserved " + reservedPrefix}
	}
	return nil
}

func quote(s string) string { return strconv.Quote(s) }

// MaxIDLen is the longest id accepted, in bytes.
const MaxIDLen = 128

// IDError explains why an id was refused before it became part of a key. It
// matches ErrInvalidID with errors.Is.
type IDError struct {
	Field  string // which id: "run id", "slug", ...
	ID     string
	Reason string
}

// ValidateID checks one id that will become a single key segment: 1 to
// MaxIDLen bytes of [A-Za-z0-9._:-], not starting with "." and not
// containing "..". That admits every id of docs/spec.md#records (run ids like
// run_2026-02-14_080000_abc123, slugs, UUIDs, inbox_..., idempotency keys
// like github:<uuid>) and refuses anything that could be a path: "/", "\",
// "..", control characters, spaces. Field names the id in the error.
func ValidateID(field, id string) error {
	switch {
	case id == "":
		return &IDError{Field: field, ID: id, Reason: "empty"}
	case len(id) > MaxIDLen:
		return &IDError{Field: field, ID: id, Reason: fmt.Sprintf("longer than %d bytes", MaxIDLen)}
	case id[0] == '.':
		return &IDError{Field: field, ID: id, Reason: `starts with "."`}
	case strings.Contains(id, ".."):
		return &IDError{Field: field, ID: id, Reason: `contains ".."`}
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return &IDError{Field: field, ID: id, Reason: fmt.Sprintf("byte %q at %d is not one of [A-Za-z0-9._:-]", c, i)}
		}
	}
	return nil
}

// Error renders the field, the id (quoted and cut) and the reason.
func (e *IDError) Error() string {
	id := e.ID
	if len(id) > 40 {
		id = id[:40] + "..."
	}
	return fmt.Sprintf("storage: invalid %s %s: %s", e.Field, quote(id), e.Reason)
}

// Unwrap returns ErrInvalidID.
func (e *IDError) Unwrap() error { return ErrInvalidID }

// ListStart reduces the cursor of a ListAfter(prefix, after) to what a
// driver is asked to do: start is "" when every key with prefix sorts after
// after (list them all), else after itself; none is true when no key with
// prefix can sort after after (yield nothing). The Store calls it after
// checking prefix and after.
func ListStart(prefix, after string) (start string, none bool) {
	switch {
	case after < prefix:
		return "", false
	case strings.HasPrefix(after, prefix):
		return after, false
	default: // after > prefix and does not start with it: past every such key
		return "", true
	}
}

// InvalidKeys lists keys every Store must refuse, for the conformance
// suite and the adapters' own tests.
func InvalidKeys() []string {
	return []string{
		"",
		"/abs",
		"trailing/",
		"double//slash",
		"..",
		".",
		"../escape",
		"a/../b",
		"a/./b",
		"nul\x00byte",
		"new\nline",
		"tab\there",
		"del\x7f",
		"c1\u0085control",
		"back\\slash",
		"bad-utf8-\xff",
		".cnv-lock",
		"a/.cnvtmp",
		LongKey() + "k",
		strings.Repeat("s", MaxSegmentLen+1),
	}
}

// LongKey is a valid key of exactly MaxKeyLen bytes, in segments of
// MaxSegmentLen.
func LongKey() string {
	var b strings.Builder
	for b.Len() < MaxKeyLen {
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		n := min(MaxSegmentLen, MaxKeyLen-b.Len())
		b.WriteString(strings.Repeat("k", n))
	}
	return b.String()
}

// invalidID is ErrInvalidID: an id a caller passed is invalid input.
type invalidID struct{}

func (invalidID) Error() string        { return "storage: invalid id" }
func (invalidID) Is(target error) bool { return target == lifecycle.ErrInvalidInput }
