package sse_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/sse"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ExampleRead reads a stream as the feed writes it: a heartbeat comment, then
// one event with its id, type and JSON data.
func ExampleRead() {
	stream := ": ping\n\nid: 20261126T010000.000000000Z-a\nevent: run.status.changed\ndata: {\"runId\":\"run-1\",\"status\":\"completed\"}\n\n"
	for ev, err := range sse.Read(strings.NewReader(stream)) {
		if err != nil {
			fmt.Println(err)
			return
		}
		p, _ := ev.Payload()
		fmt.Println(ev.ID, ev.Type, p.RunID, p.Status)
	}
	// Output:
	// 20261126T010000.000000000Z-a run.status.changed run-1 completed
}
