// Package sse reads the Worker's event stream, GET /events/stream
// (docs/http-api.md, "Events"): the wire format the feed writes and the Go
// client reads. It imports nothing of the SDK, so a client that follows the
// stream needs no engine.
package sse

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
)

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
	// Reason is a stream.reset event's: why the stream could not resume
	// exactly where the client asked.
	Reason string `json:"reason,omitempty"`
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
