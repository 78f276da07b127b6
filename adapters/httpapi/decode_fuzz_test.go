package httpapi

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/wire"
	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
)

// FuzzDecodeRequests feeds every request decoder arbitrary bytes: none may
// panic, what one accepts is one valid JSON value, and every refusal is a
// 4xx of the one code table (never a 500 for bad input).
func FuzzDecodeRequests(f *testing.F) {
	for _, seed := range []string{
		`{"agent_slug":"quick","trigger":"manual","input":{"q":1},"user_id":"u","metadata":{"a":"b"}}`,
		`{"type":"reply","id":"e-1","source":"mail"}`,
		`{"job_id":"j","run_id":"r","job_type":"BRIEF","agent_slug":"a","payload":{},"context":{"entity_refs":["x"]}}`,
		`{"id":"e","source":{"type":"ui","identity":"owner"},"intent":{"action":"research","target":"t"},"metadata":{"priority":"high","ttl_hours":3}}`,
		`{"job_id":"j","status":"COMPLETE","artifact_id":"a"}`,
		`{"qkey":"quarantine/x.json"}`,
		`{"agent_slug":"quick"} {}`, `{"bogus":1}`, `[`, `null`, "\xff", `{"agent_slug":"../x"}`,
	} {
		f.Add([]byte(seed))
	}
	// The bodies of cancel, approve and reject may be empty.
	optional := map[string]bool{"cancel": true, "decision": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(name string, err error) {
			if err == nil {
				if !json.Valid(data) && (!optional[name] || len(bytes.TrimSpace(data)) > 0) {
					t.Fatalf("%s accepted invalid JSON %q", name, data)
				}
				return
			}
			code := codeOf(err)
			if s := codes.HTTPStatus(code); s < 400 || s > 499 {
				t.Fatalf("%s refused %q with %s (%d): %v", name, data, code, s, err)
			}
		}
		_, err := decodeSubmit(data)
		check("decodeSubmit", err)
		_, err = decodeEvent(data)
		check("decodeEvent", err)
		_, err = decodeJob(data)
		check("decodeJob", err)
		_, err = requiredBody[lifecycle.InboxSubmission](data)
		check("inbox submission", err)
		_, err = decodeCallback(data)
		check("decodeCallback", err)
		_, err = decodeRestore(data)
		check("decodeRestore", err)
		var c wire.CancelBody
		check("cancel", decodeStrict(data, &c, true))
		var d wire.DecisionBody
		check("decision", decodeStrict(data, &d, true))
	})
}
