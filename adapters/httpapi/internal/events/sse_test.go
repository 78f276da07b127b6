package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/events"
)

func readAll(t *testing.T, r io.Reader) ([]events.Event, error) {
	t.Helper()
	var out []events.Event
	for ev, err := range events.Read(r) {
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
	return out, nil
}

func TestRead(t *testing.T) {
	t.Parallel()
	in := "retry: 3000\n\n" +
		": ping\n\n" +
		"id: 1\r\nevent: job.status.changed\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n" + // CRLF, data on two lines
		"id: 2\revent: inbox.new\rdata:{\"b\":2}\r\r" + // CR only, no space after the colon
		"event: x\n\n" + // no data: not dispatched
		"data: [3]\n\n" + // no id: keeps the last one, type "message"
		"data: {\"unfinished\":true}\n" // no blank line before EOF: dropped
	got, err := readAll(t, iotest.OneByteReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := []events.Event{
		{ID: "1", Type: "job.status.changed", Data: json.RawMessage("{\"a\":\n1}")},
		{ID: "2", Type: "inbox.new", Data: json.RawMessage(`{"b":2}`)},
		{ID: "2", Type: "message", Data: json.RawMessage(`[3]`)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Type != want[i].Type || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("event %d = %+v %s, want %+v %s", i, got[i], got[i].Data, want[i], want[i].Data)
		}
	}
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	if _, err := readAll(t, strings.NewReader("data: not json\n\n")); err == nil {
		t.Fatal("data that is not JSON was accepted")
	}
	long := "data: \"" + strings.Repeat("x", events.MaxLineBytes) + "\"\n\n"
	if _, err := readAll(t, strings.NewReader(long)); !errors.Is(err, events.ErrLineTooLong) {
		t.Fatalf("long line: %v", err)
	}
	boom := errors.New("boom")
	if _, err := readAll(t, io.MultiReader(strings.NewReader("data: 1\n\n"), iotest.ErrReader(boom))); !errors.Is(err, boom) {
		t.Fatalf("read error: %v", err)
	}
	// Stopping early is allowed.
	for range events.Read(strings.NewReader("data: 1\n\ndata: 2\n\n")) {
		break
	}
}

// FuzzRead: Read never panics, yields only JSON data and ids without line
// ends, and reads back exactly what the feed's encoder writes.
func FuzzRead(f *testing.F) {
	f.Add("id: 1\nevent: t\ndata: {}\n\n", "20260224T100000.000000000Z-00-0", "run.status.changed", `{"type":"x"}`)
	f.Add("data: 1\r\n\r\n: c\rdata:2\r\r", "a\nb", "t\r", "[1,\n2]")
	f.Add(strings.Repeat("data: [", 100), "", "", `"\u2028"`)
	f.Fuzz(func(t *testing.T, stream, id, typ, data string) {
		for ev, err := range events.Read(strings.NewReader(stream)) {
			if err != nil {
				break
			}
			if !json.Valid(ev.Data) || strings.ContainsAny(ev.ID, "\r\n\x00") || strings.ContainsAny(ev.Type, "\r\n") {
				t.Fatalf("bad event %+v", ev)
			}
		}
		// Round trip of what the feed writes: compact JSON, an id and a
		// type of one line.
		var c bytes.Buffer
		if json.Compact(&c, []byte(data)) != nil || strings.ContainsAny(id, "\r\n\x00") || typ == "" || strings.ContainsAny(typ, "\r\n\x00") {
			return
		}
		in := events.Event{ID: id, Type: typ, Data: c.Bytes()}
		var got []events.Event
		for ev, err := range events.Read(bytes.NewReader(events.EncodeFrame(in))) {
			if err != nil {
				t.Fatalf("reading %q: %v", events.EncodeFrame(in), err)
			}
			got = append(got, ev)
		}
		if len(got) != 1 || got[0].ID != in.ID || got[0].Type != in.Type || !bytes.Equal(got[0].Data, in.Data) {
			t.Fatalf("round trip of %+v gave %+v (wire %q)", in, got, events.EncodeFrame(in))
		}
	})
}

// endless yields "data: 1\n" lines, up to limit bytes, and counts what was
// read: a hostile or broken server that never ends its event.
type endless struct{ n, limit int }

func (e *endless) Read(p []byte) (int, error) {
	const line = "data: 1\n"
	if e.n >= e.limit {
		return 0, io.EOF
	}
	k := 0
	for k+len(line) <= len(p) && e.n+k < e.limit {
		k += copy(p[k:], line)
	}
	e.n += k
	return k, nil
}

// TestReadBoundsAnEvent: the data of one event is bounded as a line is.
// Many short data lines that never end their event grew the reader's
// buffer without limit (a client's Wait against a hostile server).
func TestReadBoundsAnEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		r    io.Reader
	}{
		{name: "short data lines without end", r: &endless{limit: 64 << 20}},
		{name: "long data lines without end", r: io.MultiReader(
			strings.NewReader(strings.Repeat("data: "+strings.Repeat("1", events.MaxLineBytes-10)+"\n", events.MaxEventBytes/(events.MaxLineBytes-10)+2)),
			strings.NewReader("\n"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := readAll(t, tt.r)
			if !errors.Is(err, events.ErrEventTooLarge) {
				t.Fatalf("err %v, want ErrEventTooLarge", err)
			}
			if e, ok := tt.r.(*endless); ok && e.n > 5*events.MaxEventBytes {
				t.Errorf("read %d bytes before refusing, want about 4 MaxEventBytes (%d) of \"data: 1\\n\"", e.n, events.MaxEventBytes)
			}
		})
	}
	// An event of just under the bound is read.
	data := "[" + strings.Repeat("1,\n", events.MaxEventBytes/3-8) + "1]"
	evs, err := readAll(t, strings.NewReader("data: "+strings.ReplaceAll(data, "\n", "\ndata: ")+"\n\n"))
	if err != nil || len(evs) != 1 {
		t.Fatalf("event under the bound: %d events, %v", len(evs), err)
	}
}
