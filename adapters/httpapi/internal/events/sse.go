package events

import (
	"encoding/json"
	"io"
	"iter"
	"strings"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/sse"
)

// The event types of the contract (docs/http-api.md, "Events").
const (
	TypeRunStatusChanged   = "run.status.changed"
	TypeRunStepCompleted   = "run.step.completed"
	TypeInboxNew           = "inbox.new"
	TypeInboxStatusChanged = "inbox.status.changed"
	TypeJobStatusChanged   = "job.status.changed"
	TypeNLMStatusChanged   = "nlm.status.changed"
	// TypeProposalCreated and TypeProposalStatusChanged: a run created a
	// proposal; the gateway applied or rejected one.
	TypeProposalCreated       = "proposal.created"
	TypeProposalStatusChanged = "proposal.status.changed"
	// TypeStreamReset opens a resumed stream whose Last-Event-ID the feed
	// cannot resume from exactly: the client may have missed events, and
	// re-reads the state it shows. Its data is {"type", "reason"}, reason
	// one of the Reset constants; it carries no id.
	TypeStreamReset = "stream.reset"
)

// The reader of the stream lives in package sse, which the Go client
// imports without the feed; these names keep the feed's API.

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

// MaxLineBytes is the longest line Read accepts (sse.MaxLineBytes).
const MaxLineBytes = sse.MaxLineBytes

// MaxEventBytes is the most data Read gathers for one event
// (sse.MaxEventBytes).
const MaxEventBytes = sse.MaxEventBytes

// Event is one server-sent event (sse.Event).
type Event = sse.Event

// Payload is the data of every event type of the contract (sse.Payload).
type Payload = sse.Payload

// ErrLineTooLong is yielded by Read for a line over MaxLineBytes.
var ErrLineTooLong = sse.ErrLineTooLong

// ErrEventTooLarge is yielded by Read for an event whose data is over
// MaxEventBytes.
var ErrEventTooLarge = sse.ErrEventTooLarge

// Read parses a text/event-stream (sse.Read).
func Read(r io.Reader) iter.Seq2[Event, error] { return sse.Read(r) }

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
