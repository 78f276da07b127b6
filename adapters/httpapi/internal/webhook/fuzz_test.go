package webhook_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// FuzzDelivery feeds the handler arbitrary bodies and headers, signed or
// not, for either source. An unsigned or wrongly signed one is always 401;
// a signed one gets one of the documented answers; no 4xx writes anything;
// every answer is JSON with a code exactly when it is an error.
func FuzzDelivery(f *testing.F) {
	f.Add(false, []byte(ghPR("opened", 7)), "pull_request", "d-1", true, int64(0))
	f.Add(false, []byte(`{"action":"opened","issue":{"number":-3},"repository":{"full_name":"a\u0000b"}}`), "issues", "d-2", true, int64(0))
	f.Add(false, []byte(`payload=%7B%7D`), "ping", "../x", true, int64(0))
	f.Add(false, []byte(`{}`), "pull_request", "d-3", false, int64(0))
	f.Add(true, slackCmd(t0, "/research", "1.1").body, "", "", true, int64(0))
	f.Add(true, []byte(`payload=%7B%22type%22%3A%22block_actions%22%7D`), "", "", true, int64(-301))
	f.Add(true, []byte(`team_id=T1&trigger_id=a:b&command=/research`), "", "", true, int64(400))
	f.Add(true, []byte(`%zz`), "", "", false, int64(0))
	r := newRig(f)
	f.Fuzz(func(t *testing.T, slack bool, body []byte, event, id string, sign bool, offset int64) {
		var d delivery
		if slack {
			at := t0.Add(time.Duration(offset%3600) * time.Second)
			d = slackForm(at, nil)
			d.body = body
			ts := strconv.FormatInt(at.Unix(), 10)
			d.header["X-Slack-Signature"] = slackSig(slackSecret, ts, body)
			if !sign {
				d.header["X-Slack-Signature"] = slackSig("not-the-secret", ts, body)
			}
		} else {
			d = gh(id, event, string(body))
			if !sign {
				d.header["X-Hub-Signature-256"] = githubSig("not-the-secret", body)
			}
		}
		writes := r.store.writes.Load()
		a := r.serve(r.h, d)
		if a.body == nil {
			t.Fatalf("answer %d is not a JSON object: %q", a.status, a.raw)
		}
		switch {
		case !sign && (a.status != 401 || a.code != "WEBHOOK_SIGNATURE_INVALID"):
			t.Fatalf("unsigned delivery answered %d %s", a.status, a.raw)
		case a.status >= 400 && (a.code == "" || r.store.writes.Load() != writes):
			t.Fatalf("%d %s wrote to the store or has no code", a.status, a.raw)
		case a.status < 400 && (a.code != "" || (a.runID != "") != a.started):
			t.Fatalf("%d %s", a.status, a.raw)
		}
		if !allowed[a.status] {
			t.Fatalf("undocumented status %d %s", a.status, a.raw)
		}
		if a.status == 401 && a.code == "WEBHOOK_STALE" && (!slack || offset%3600 >= -300 && offset%3600 <= 300) {
			t.Fatalf("stale at offset %d: %s", offset, a.raw)
		}
		var v any
		if json.Unmarshal([]byte(a.raw), &v) != nil {
			t.Fatalf("not JSON: %q", a.raw)
		}
	})
}

var allowed = map[int]bool{200: true, 201: true, 202: true, 400: true, 401: true, 409: true, 413: true}
