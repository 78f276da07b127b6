package jsonenc

import (
	"encoding/json"
	"time"
)

// Decoder is a document with a decoder of its own for the JSON its
// Appender writes, equal in result and errors to json.Unmarshal's.
type Decoder interface {
	DecodeJSON(b []byte) error
}

// Unmarshal is json.Unmarshal, through DecodeJSON when v implements
// Decoder.
func Unmarshal(b []byte, v any) error {
	if d, ok := v.(Decoder); ok {
		return d.DecodeJSON(b)
	}
	return json.Unmarshal(b, v)
}

// Reader reads the plain JSON of a known document without reflection: the
// members of an object under their exact names, strings, integers, times,
// raw values and null where its caller allows one. Anything else (an
// unknown or differently cased name, a repeated one, a float where an
// integer goes, a syntax error) makes it fail, and its caller decodes the
// whole document with json.Unmarshal instead, which gives that input its
// meaning or its error: so a Reader needs to be right only about what it
// accepts, which each user's fuzz test compares with json.Unmarshal.
type Reader struct {
	b      []byte
	i      int
	failed bool
}

// NewReader reads b.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Fail marks the input as one to leave to json.Unmarshal.
func (r *Reader) Fail() { r.failed = true }

// OK tells whether everything read so far was read.
func (r *Reader) OK() bool { return !r.failed }

// End tells whether the input was read whole: nothing failed and only
// white space follows.
func (r *Reader) End() bool {
	r.ws()
	return !r.failed && r.i == len(r.b)
}

func (r *Reader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// Open consumes c ('{' or '[').
func (r *Reader) Open(c byte) bool {
	r.ws()
	if r.failed || r.i >= len(r.b) || r.b[r.i] != c {
		r.failed = true
		return false
	}
	r.i++
	return true
}

// More tells whether another member or element follows, consuming the
// comma before it (none before the first), or the closing byte when none
// does. for first := true; r.More('}', first); first = false {...}
func (r *Reader) More(closing byte, first bool) bool {
	r.ws()
	if r.failed || r.i >= len(r.b) {
		r.failed = true
		return false
	}
	if r.b[r.i] == closing {
		r.i++
		return false
	}
	if !first {
		if r.b[r.i] != ',' {
			r.failed = true
			return false
		}
		r.i++
	}
	return true
}

// Key reads a member's name and its colon. A name with an escape or a
// byte outside ASCII fails (json.Unmarshal matches such names in ways a
// Reader does not).
func (r *Reader) Key() []byte {
	start, end, plain := r.str()
	if !plain {
		r.failed = true
	}
	r.ws()
	if r.failed || r.i >= len(r.b) || r.b[r.i] != ':' {
		r.failed = true
		return nil
	}
	r.i++
	return r.b[start:end]
}

// str reads a string literal: start and end of its content, and whether it
// holds no escape and no byte outside ASCII. A control character fails.
func (r *Reader) str() (start, end int, plain bool) {
	r.ws()
	if r.failed || r.i >= len(r.b) || r.b[r.i] != '"' {
		r.failed = true
		return 0, 0, false
	}
	r.i++
	start, plain = r.i, true
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case c == '"':
			end = r.i
			r.i++
			return start, end, plain
		case c < 0x20:
			r.failed = true
			return 0, 0, false
		case c == '\\':
			plain = false
			r.i += 2
			continue
		case c >= 0x80:
			plain = false
		}
		r.i++
	}
	r.failed = true
	return 0, 0, false
}

// String reads a string; one with escapes or bytes outside ASCII is
// decoded by json.Unmarshal, so it means what it means there.
func (r *Reader) String() string {
	start, end, plain := r.str()
	if r.failed {
		return ""
	}
	if plain {
		return string(r.b[start:end])
	}
	var s string
	if err := json.Unmarshal(r.b[start-1:end+1], &s); err != nil {
		r.failed = true
	}
	return s
}

// Null consumes a null, if one is next.
func (r *Reader) Null() bool {
	r.ws()
	if !r.failed && len(r.b)-r.i >= 4 && string(r.b[r.i:r.i+4]) == "null" {
		r.i += 4
		return true
	}
	return false
}

// Int reads an integer of at most 18 digits; a fraction, an exponent or
// more digits fail.
func (r *Reader) Int() int64 {
	r.ws()
	if r.failed || r.i >= len(r.b) {
		r.failed = true
		return 0
	}
	neg := r.b[r.i] == '-'
	if neg {
		r.i++
	}
	start := r.i
	var n int64
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		n = n*10 + int64(r.b[r.i]-'0')
		r.i++
	}
	digits := r.i - start
	if digits == 0 || digits > 18 || (digits > 1 && r.b[start] == '0') ||
		r.i < len(r.b) && (r.b[r.i] == '.' || r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.failed = true
		return 0
	}
	if neg {
		n = -n
	}
	return n
}

// Time reads a time as time.Time's UnmarshalJSON does, from the literal
// json.Unmarshal would hand it.
func (r *Reader) Time() time.Time {
	start, end, _ := r.str()
	var t time.Time
	if r.failed {
		return t
	}
	if err := t.UnmarshalJSON(r.b[start-1 : end+1]); err != nil {
		r.failed = true
	}
	return t
}

// Raw reads any valid JSON value and returns a copy of its bytes, as
// json.RawMessage holds it.
func (r *Reader) Raw() json.RawMessage {
	start, end := r.Skip()
	raw := r.b[start:end]
	if r.failed || !json.Valid(raw) {
		r.failed = true
		return nil
	}
	return append(json.RawMessage(nil), raw...)
}

// Skip passes over one value and returns where its bytes are, without
// checking them further than their nesting: for input known valid (it
// was decoded already) whose values are only carried along.
func (r *Reader) Skip() (start, end int) {
	r.ws()
	start = r.i
	depth := 0
	for !r.failed && r.i < len(r.b) {
		c := r.b[r.i]
		switch c {
		case '"':
			r.str()
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				goto done
			}
			depth--
		case ',':
			if depth == 0 {
				goto done
			}
		}
		r.i++
	}
done:
	end = r.i
	for end > start && (r.b[end-1] == ' ' || r.b[end-1] == '\t' || r.b[end-1] == '\n' || r.b[end-1] == '\r') {
		end--
	}
	if depth != 0 || end == start {
		r.failed = true
	}
	return start, end
}

// Enum reads a string that is usually one of known (a state, an event, an
// actor): one of them is returned as it is, with no copy of its bytes;
// anything else as String reads it.
func Enum[S ~string](r *Reader, known []S) S {
	save := r.i
	start, end, plain := r.str()
	if r.failed {
		return ""
	}
	if plain {
		for _, k := range known {
			if string(k) == string(r.b[start:end]) {
				return k
			}
		}
	}
	r.i = save
	return S(r.String())
}
