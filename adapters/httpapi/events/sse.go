package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
)

// The event types of the contract (docs/http-api.md, "Events").
const (
	TypeRunStatusChanged   = "run.status.changed"
	TypeRunStepCompleted   = "run.step.completed"
	TypeInboxNew           = "inbox.new"
	TypeInboxStatusChanged = "inbox.status.changed"
	TypeJobStatusChanged   = "job.status.changed"
	TypeNLMStatusChanged   = "nlm.status.changed"
	// TypeStreamReset opens a resumed stream whose Last-Event-ID the feed
	// cannot resume from exactly: the client may have missed events, and
	// re-reads the state it shows. Its data is {"type", "reason"}, reason
	// one of the Reset constants; it carries no id.
	TypeStreamReset = "stream.reset"
)

// The reasons of a stream.reset event.
const (
	// ResetInvalid: the Last-Event-ID is not an id of this feed. The
	// stream goes on live.
	ResetInvalid = "invalid_id"
	// ResetGone: the event is no longer in the store (retention deleted
	// it, or it never was). The replay starts at the next event there is.
	ResetGone = "gone"
	// ResetTooOld: the event is older than the feed replays
	// (Config.MaxReplay). The replay starts MaxReplay ago.
	ResetTooOld = "too_old"
)

// resetFrame is the stream.reset event for reason, on the wire.
func resetFrame(reason string) []byte {
	data, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	}{TypeStreamReset, reason})
	return appendFrame(nil, Event{Type: TypeStreamReset, Data: data})
}

// MaxLineBytes is the longest line Read accepts. The feed's lines are far
// shorter (ids are at most storage.MaxIDLen); the bound keeps a broken or
// hostile server from growing a reader's memory without limit.
const MaxLineBytes = 64 << 10

// Event is one server-sent event: its id (the audit event's), its type
// and its JSON data.
type Event struct {
	ID   string
	Type string
	Data json.RawMessage
}

// Payload is the data of every event type of the contract in one struct;
// a field an event type does not carry stays zero.
type Payload struct {
	Type      string `json:"type"`
	RunID     string `json:"runId,omitempty"`
	AgentSlug string `json:"agentSlug,omitempty"`
	EntryID   string `json:"entryId,omitempty"`
	JobID     string `json:"jobId,omitempty"`
	Status    string `json:"status,omitempty"`
	From      string `json:"from,omitempty"`
	Step      int    `json:"step,omitempty"`
	Count     int    `json:"count,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// Payload decodes e.Data.
func (e Event) Payload() (Payload, error) {
	var p Payload
	err := json.Unmarshal(e.Data, &p)
	return p, err
}

// MaxEventBytes is the most data Read gathers for one event (the joined
// data lines). The feed's events are one line of far less; the bound keeps
// a server that sends data lines and never ends its event from growing a
// reader's memory without limit, as MaxLineBytes does for one line.
const MaxEventBytes = 1 << 20

// ErrLineTooLong is yielded by Read for a line over MaxLineBytes.
var ErrLineTooLong = errors.New("events: line too long")

// ErrEventTooLarge is yielded by Read for an event whose data is over
// MaxEventBytes.
var ErrEventTooLarge = errors.New("events: event too large")

// Read parses a text/event-stream (the WHATWG server-sent events format)
// and yields each event whose data is JSON. Comments (": ping") and retry
// fields are skipped; an event without data is not dispatched, as in a
// browser; an event's ID is the last id field seen, so it carries over
// to events without one. Iteration ends at EOF (a final event not ended by
// a blank line is dropped, as the format says), or after yielding the first
// error: a read error, a line over MaxLineBytes, an event's data over
// MaxEventBytes, or data that is not JSON.
func Read(r io.Reader) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 4096), MaxLineBytes)
		sc.Split(scanLines)
		var (
			lastID  string
			typ     string
			data    bytes.Buffer
			hasData bool
		)
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) == 0 {
				if hasData {
					d := json.RawMessage(bytes.Clone(data.Bytes()))
					if !json.Valid(d) {
						yield(Event{}, fmt.Errorf("events: event %q: data is not JSON", lastID))
						return
					}
					if typ == "" {
						typ = "message"
					}
					if !yield(Event{ID: lastID, Type: typ, Data: d}, nil) {
						return
					}
				}
				typ, hasData = "", false
				data.Reset()
				continue
			}
			if line[0] == ':' {
				continue // a comment: the heartbeat
			}
			field, value, _ := bytes.Cut(line, []byte{':'})
			value = bytes.TrimPrefix(value, []byte{' '})
			switch string(field) {
			case "id":
				if !bytes.ContainsRune(value, 0) {
					lastID = string(value)
				}
			case "event":
				typ = string(value)
			case "data":
				if data.Len()+1+len(value) > MaxEventBytes {
					yield(Event{}, ErrEventTooLarge)
					return
				}
				if hasData {
					data.WriteByte('\n')
				}
				data.Write(value)
				hasData = true
			}
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				err = ErrLineTooLong
			}
			yield(Event{}, err)
		}
	}
}

// scanLines splits at "\r\n", "\n" or "\r", the three line ends the format
// allows.
func scanLines(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil // a "\r" at the end: wait to see whether "\n" follows
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// appendFrame appends e in the wire format: id, event, one data line per
// line of data. The feed's data is compact JSON, one line; ids and types
// are the store's and the contract's, which hold no line ends, but they
// are cut at one anyway so no value can inject a field.
func appendFrame(b []byte, e Event) []byte {
	if e.ID != "" {
		b = append(b, "id: "...)
		b = append(b, oneLine(e.ID)...)
		b = append(b, '\n')
	}
	b = append(b, "event: "...)
	b = append(b, oneLine(e.Type)...)
	b = append(b, '\n')
	for _, l := range strings.FieldsFunc(strings.ReplaceAll(string(e.Data), "\r\n", "\n"), func(r rune) bool { return r == '\n' || r == '\r' }) {
		b = append(b, "data: "...)
		b = append(b, l...)
		b = append(b, '\n')
	}
	return append(b, '\n')
}

func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n\x00"); i >= 0 {
		return s[:i]
	}
	return s
}
