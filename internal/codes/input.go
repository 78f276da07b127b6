package codes

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/runconveyor/conveyor/lifecycle"
)

// Limits of the free text and documents a caller hands the SDK, in bytes
// (MaxListLen: in items). Every such field is checked by [CheckText] or
// [CheckBytes] before anything is written, so no caller can put megabytes or
// undecodable bytes into status.json, a job record or an artifact.
// docs/spec.md#limits lists which field takes which limit.
const (
	// MaxNameBytes bounds a name: who decided (decided_by), a source
	// identity, an event type, a tag, a trigger, a correlation id.
	MaxNameBytes = 256
	// MaxRefBytes bounds a reference to something outside the SDK: an
	// external event's id and source, an entity ref, a source ref, an inbox
	// target.
	MaxRefBytes = 1024
	// MaxURLBytes bounds a URL (a callback, a context snapshot); presigned
	// S3 URLs with a session token run to a few KiB.
	MaxURLBytes = 4096
	// MaxTextBytes bounds a paragraph of free text: a cancel, approval or
	// rejection reason, a source excerpt.
	MaxTextBytes = 4096
	// MaxDocumentBytes bounds a JSON document or a long text: a run's input,
	// a job's payload, an artifact's content, an NLM query. It keeps every
	// record that embeds one small enough to be re-read on each write.
	MaxDocumentBytes = 1 << 20
	// MaxListLen bounds the items of a list field: tags, entity refs,
	// sources.
	MaxListLen = 256
	// DefaultPageLimit is how many items a page of a list holds when the
	// caller names no limit; MaxPageLimit is the most a caller may ask for
	// (a larger limit is refused, not cut, so a client learns the bound).
	DefaultPageLimit = 50
	MaxPageLimit     = 500
	// MaxBatchJobs bounds the jobs of one batch insert (the queue's
	// EnqueueMany, POST /jobs/batch): the queue checks them all before a
	// write and holds them and their records in memory, and the batch is
	// split into commits of at most 500 jobs (two writes a job, within
	// the store's 1,000 a commit).
	MaxBatchJobs = 10000
)

// TextKind says which control characters a text field may hold.
type TextKind int

const (
	// OneLine is a name, an id or a reference: no control characters at all
	// (they would break log lines and headers).
	OneLine TextKind = iota
	// MultiLine is prose such as a reason: tab, line feed and carriage
	// return are allowed, other control characters are not.
	MultiLine
)

func tooLarge(field string, size, limit int, unit string) *lifecycle.InputError {
	return &lifecycle.InputError{Field: field, Limit: limit, Size: size,
		Reason: fmt.Sprintf("%d %s, more than the limit of %d", size, unit, limit)}
}

// CheckText reports whether s may be stored as field: at most limit bytes
// of valid UTF-8 without NUL, and without the control characters kind
// forbids. The empty string passes; a caller that requires the field says
// so itself. It returns nil or an *lifecycle.InputError.
func CheckText(field, s string, limit int, kind TextKind) error {
	if len(s) > limit {
		return tooLarge(field, len(s), limit, "bytes")
	}
	if !utf8.ValidString(s) {
		return &lifecycle.InputError{Field: field, Limit: limit, Reason: "not valid UTF-8"}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 0:
			return &lifecycle.InputError{Field: field, Limit: limit, Reason: fmt.Sprintf("NUL byte at %d", i)}
		case c >= 0x20 && c != 0x7f:
		case kind == MultiLine && (c == '\t' || c == '\n' || c == '\r'):
		default:
			return &lifecycle.InputError{Field: field, Limit: limit, Reason: fmt.Sprintf("control character %#02x at %d", c, i)}
		}
	}
	return nil
}

// CheckBytes reports whether b may be stored as document field: at most
// limit bytes of valid UTF-8 without NUL bytes. Whether b is JSON, and of
// which shape, is the caller's check. It returns nil or an *lifecycle.InputError.
func CheckBytes(field string, b []byte, limit int) error {
	if len(b) > limit {
		return tooLarge(field, len(b), limit, "bytes")
	}
	if !utf8.Valid(b) {
		return &lifecycle.InputError{Field: field, Limit: limit, Reason: "not valid UTF-8"}
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return &lifecycle.InputError{Field: field, Limit: limit, Reason: fmt.Sprintf("NUL byte at %d", i)}
	}
	return nil
}

// CheckList reports whether a list field of n items fits MaxListLen; it
// returns nil or an *lifecycle.InputError.
func CheckList(field string, n int) error {
	if n > MaxListLen {
		return tooLarge(field, n, MaxListLen, "items")
	}
	return nil
}

// CheckBatch reports whether a batch of n jobs fits MaxBatchJobs; it
// returns nil or an *lifecycle.InputError.
func CheckBatch(field string, n int) error {
	if n > MaxBatchJobs {
		return tooLarge(field, n, MaxBatchJobs, "jobs")
	}
	return nil
}

// CheckJSON reports whether the JSON document b may be stored as field, or
// decoded: [CheckBytes], and no \u escape that names half of a UTF-16
// surrogate pair alone. encoding/json turns invalid UTF-8 and a lone
// surrogate alike into U+FFFD without a word, so what was sent would not be
// what is stored; I-JSON (RFC 7493 §2.1) refuses both. Whether b is JSON at
// all is the caller's check. It returns nil or an *lifecycle.InputError.
func CheckJSON(field string, b []byte, limit int) error {
	if err := CheckBytes(field, b, limit); err != nil {
		return err
	}
	if i := loneSurrogate(b); i >= 0 {
		return &lifecycle.InputError{Field: field, Limit: limit, Reason: fmt.Sprintf("lone UTF-16 surrogate escape at %d", i)}
	}
	return nil
}

// loneSurrogate returns the offset of the first \u escape inside a JSON
// string that is a high surrogate not followed by a low one, or a low one
// not preceded by a high one; -1 when there is none. Bytes outside strings
// are not looked at (a backslash there is invalid JSON, the decoder's
// refusal).
func loneSurrogate(b []byte) int {
	in := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			in = !in
		case c == '\\' && in:
			if i+1 >= len(b) || b[i+1] != 'u' {
				i++ // a one-character escape, \" and \\ included
				continue
			}
			r, ok := hex4(b, i+2)
			switch {
			case !ok || r < 0xd800 || r > 0xdfff:
				i++
			case r >= 0xdc00:
				return i // a low surrogate with no high one before it
			default:
				lo, ok := hex4(b, i+8)
				if i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' || !ok || lo < 0xdc00 || lo > 0xdfff {
					return i
				}
				i += 11 // the pair
			}
		}
	}
	return -1
}

// hex4 reads four hex digits at b[i:], as a \u escape holds.
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// CheckContext refuses a transition context whose free text breaks the SDK's input limits,
// with an [*lifecycle.InputError]: UserID over MaxNameBytes or not one line of clean
// text, an Initiator not of the set above, more than MaxListLen metadata
// entries, a metadata key over MaxNameBytes or a value over MaxTextBytes
// (values may span lines). The zero context passes.
func CheckContext(tc *lifecycle.TransitionContext) error {
	if err := CheckText("user_id", tc.UserID, MaxNameBytes, OneLine); err != nil {
		return err
	}
	switch tc.Initiator {
	case "", lifecycle.InitiatorUser, lifecycle.InitiatorSystem, lifecycle.InitiatorTimeout, lifecycle.InitiatorPolicy, lifecycle.InitiatorWebhook, lifecycle.InitiatorApproval:
	default:
		if err := CheckText("initiator", string(tc.Initiator), MaxNameBytes, OneLine); err != nil {
			return err
		}
		return &lifecycle.InputError{Field: "initiator", Limit: MaxNameBytes,
			Reason: "not one of user, system, timeout, policy, webhook, approval"}
	}
	if err := CheckList("metadata", len(tc.Metadata)); err != nil {
		return err
	}
	for k, v := range tc.Metadata {
		if k == "" {
			return &lifecycle.InputError{Field: "metadata", Limit: MaxNameBytes, Reason: "empty key"}
		}
		if err := CheckText("metadata key", k, MaxNameBytes, OneLine); err != nil {
			return err
		}
		if err := CheckText("metadata["+k+"]", v, MaxTextBytes, MultiLine); err != nil {
			return err
		}
	}
	return nil
}
