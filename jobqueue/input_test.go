package jobqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/storekey"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/jobqueue"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/storage"
)

// badValue is one bad value of a field: over its limit, not UTF-8, or with
// a NUL byte.
type badValue struct {
	name, value, code string
}

func badValues(limit int) []badValue {
	return []badValue{
		{"oversized", strings.Repeat("x", limit+1), codes.InputTooLarge},
		{"invalid UTF-8", "ok\xff\xfe", codes.InvalidInput},
		{"NUL", "ok\x00ok", codes.InvalidInput},
	}
}

// checkRefused asserts err is a refusal of bad input matching sentinel and
// carrying code, that an *InputError for field is in its chain (unless the
// field is an id, which storage.ErrInvalidID refuses), and that the store did
// not change.
func checkRefused(t *testing.T, err error, sentinel error, field, code string, s *storage.Store, before map[string]string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("err = %.300v, want %v", err, sentinel)
	}
	if got := lifecycle.ErrorCode(err); got != code {
		t.Errorf("code %s, want %s (%.300v)", got, code, err)
	}
	if field != "" {
		var ie *lifecycle.InputError
		if !errors.As(err, &ie) || ie.Field != field {
			t.Errorf("no *InputError for %s in %.300v", field, err)
		}
	}
	if len(fmt.Sprint(err)) > 400 {
		t.Errorf("message of %d bytes: the value leaked into it", len(fmt.Sprint(err)))
	}
	teststores.Unchanged(t, s, before)
}

// TestEnqueueRefusesBadText sends every caller field of NewJob each bad
// value and checks the code, the typed error and that nothing was written
// (issue 10 F).
func TestEnqueueRefusesBadText(t *testing.T) {
	t.Parallel()
	s := memstore.New()
	q := newQueue(t, s, clock.NewFake(t0))
	enqueue(t, q, "job-0", "agent") // something in the store to keep
	ctx := context.Background()
	// payload wraps v in a JSON string, so v's fault is all that is wrong.
	payload := func(v string) json.RawMessage { return json.RawMessage(`{"q":"` + v + `"}`) }
	inputs := []struct {
		field string // "" for an id, which is storage's to refuse
		limit int
		set   func(n *jobqueue.NewJob, v string)
	}{
		{"payload", codes.MaxDocumentBytes, func(n *jobqueue.NewJob, v string) { n.Payload = payload(v) }},
		{"callback", codes.MaxURLBytes, func(n *jobqueue.NewJob, v string) { n.Callback = "https://example.com/" + v }},
		{"context.memory_snapshot_url", codes.MaxURLBytes, func(n *jobqueue.NewJob, v string) { n.Context.MemorySnapshotURL = "s3://b/" + v }},
		{"context.entity_refs[1]", codes.MaxRefBytes, func(n *jobqueue.NewJob, v string) { n.Context.EntityRefs = []string{"e0", v} }},
		{"job_type", codes.MaxNameBytes, func(n *jobqueue.NewJob, v string) { n.JobType = lifecycle.JobType(v) }},
		{"", storekey.MaxIDLen, func(n *jobqueue.NewJob, v string) { n.JobID = v }},
		{"", storekey.MaxIDLen, func(n *jobqueue.NewJob, v string) { n.RunID = v }},
		{"", storekey.MaxIDLen, func(n *jobqueue.NewJob, v string) { n.AgentSlug = v }},
		{"", storekey.MaxIDLen, func(n *jobqueue.NewJob, v string) { n.ProjectID = v }},
	}
	for i, in := range inputs {
		for j, bv := range badValues(in.limit) {
			t.Run(fmt.Sprintf("%d %s/%s", i, in.field, bv.name), func(t *testing.T) {
				// A job id of its own, so that without the checks each case
				// shows what it would write.
				n := spec(fmt.Sprintf("job-%d-%d", i, j), "agent")
				in.set(&n, bv.value)
				before := teststores.Snapshot(t, s)
				_, err := q.Enqueue(ctx, lifecycle.ActorGateway, n)
				code := bv.code
				if in.field == "" {
					code = codes.InvalidInput // an id is a format: 400 whatever is wrong
				}
				checkRefused(t, err, lifecycle.ErrInvalidJob, in.field, code, s, before)
			})
		}
	}
	// A payload escape that decodes to half a UTF-16 pair: any decoder
	// would read U+FFFD, not what was sent (issue 18).
	t.Run("payload with a lone surrogate escape", func(t *testing.T) {
		n := spec("job-surrogate", "agent")
		n.Payload = json.RawMessage(`{"q":"\ud800"}`)
		before := teststores.Snapshot(t, s)
		_, err := q.Enqueue(ctx, lifecycle.ActorGateway, n)
		checkRefused(t, err, lifecycle.ErrInvalidJob, "payload", codes.InvalidInput, s, before)
	})
	t.Run("too many entity refs", func(t *testing.T) {
		n := spec("job-1", "agent")
		n.Context.EntityRefs = make([]string, codes.MaxListLen+1)
		for i := range n.Context.EntityRefs {
			n.Context.EntityRefs[i] = "e"
		}
		before := teststores.Snapshot(t, s)
		_, err := q.Enqueue(ctx, lifecycle.ActorGateway, n)
		checkRefused(t, err, lifecycle.ErrInvalidJob, "context.entity_refs", codes.InputTooLarge, s, before)
	})
	t.Run("at the limits", func(t *testing.T) {
		n := spec("job-2", "agent")
		n.Payload = payload(strings.Repeat("ż", (codes.MaxDocumentBytes-8)/2))
		n.Callback = "https://example.com/" + strings.Repeat("x", codes.MaxURLBytes-20)
		if _, err := q.Enqueue(ctx, lifecycle.ActorGateway, n); err != nil {
			t.Fatalf("payload of %d bytes: %v", len(n.Payload), err)
		}
	})
}
