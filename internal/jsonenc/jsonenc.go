// Package jsonenc writes and reads the JSON of the few documents every job
// writes and reads (its record, its audit object) without reflection, whose
// cost was the largest share of a job's CPU outside the store
// (docs/performance.md, "CPU per job outside the store"). Appending is byte
// for byte what encoding/json's Marshal writes; reading (Reader) accepts
// the plain form and leaves anything else to json.Unmarshal, so results and
// errors are json.Unmarshal's. A type opts in by implementing Appender and
// Decoder; each such type has tests that compare it with encoding/json on
// documents with every field set, and fuzz tests.
package jsonenc

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Appender is a document that appends its own JSON encoding, identical to
// what json.Marshal writes for it.
type Appender interface {
	AppendJSON(b []byte) ([]byte, error)
}

// Marshal is json.Marshal, through AppendJSON when v implements Appender.
// The document is appended to a reused scratch buffer and copied out at
// its size, so a call allocates its result alone, of the size it is
// (encoding/json keeps its buffers in a sync.Pool the same way).
func Marshal(v any) ([]byte, error) {
	a, ok := v.(Appender)
	if !ok {
		return json.Marshal(v)
	}
	buf := scratch.Get().(*[]byte)
	b, err := a.AppendJSON((*buf)[:0])
	var out []byte
	if err == nil {
		out = append(make([]byte, 0, len(b)), b...)
	}
	if cap(b) <= maxScratch {
		*buf = b
		scratch.Put(buf)
	}
	return out, err
}

// maxScratch is the largest buffer Marshal keeps for reuse: a document
// larger than that (a job record with a large payload) is rare, and its
// buffer is left to the collector.
const maxScratch = 64 << 10

var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

const hex = "0123456789abcdef"

// plain marks the ASCII bytes a JSON string holds as they are: not a
// control character, quote, backslash or HTML character.
var plain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// String appends s as a JSON string the way json.Marshal does: HTML
// characters, control characters, U+2028 and U+2029 escaped, invalid UTF-8
// replaced by U+FFFD.
func String(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// OmitEmpty appends a string field tagged omitempty: name (with its
// leading comma and colon) and s, or nothing when s is "".
func OmitEmpty(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return String(append(b, name...), s)
}

// Time appends t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, quoted), and fails where it fails (a year outside
// 0-9999, an offset of a day or more).
func Time(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, timeError(t)
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return b, timeError(t)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// timeError is MarshalJSON's own error for t, which it refuses.
func timeError(t time.Time) error {
	if _, err := t.MarshalJSON(); err != nil {
		return err
	}
	return &json.UnsupportedValueError{Str: t.String()}
}

// asIs tells whether raw holds no byte that compacting or escaping could
// change: whitespace, an HTML character, or the first byte of U+2028 and
// U+2029.
func asIs(raw []byte) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n', '<', '>', '&', 0xe2:
			return false
		}
	}
	return true
}

// Int appends n.
func Int(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

// Raw appends a non-empty json.RawMessage as json.Marshal does: compacted,
// with HTML characters escaped, refused when it is not valid JSON. A value
// that is already compact and holds no byte to escape is appended as it is.
func Raw(b []byte, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return append(b, "null"...), nil
	}
	if asIs(raw) && json.Valid(raw) {
		return append(b, raw...), nil
	}
	out, err := json.Marshal(raw)
	if err != nil {
		return b, err
	}
	return append(b, out...), nil
}
