package webhook_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/webhook"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/testkit/teststores"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDeliveries sends each delivery after its earlier ones and asserts the
// status, the code or "started", the runs in the store, and, for every
// answer that starts nothing, that the store is unchanged.
func TestDeliveries(t *testing.T) {
	t.Parallel()
	const id1, id2 = "72d3162e-cc78-11e3-81ab-4c9367dc0958", "8a1c2f90-cc78-11e3-81ab-4c9367dc0958"
	tests := []struct {
		name   string
		before []delivery
		send   delivery
		status int
		code   string // of an error; "" for a 2xx
		// started: the answer says a run was started (2xx only); runs are
		// every agent's runs afterwards.
		started bool
		agent   string
		runs    map[string]int
		// unchanged: the store is as before the delivery; sameAsLast: the
		// answer's status and body are the last earlier delivery's.
		unchanged, sameAsLast bool
	}{
		{name: "github good", send: gh(id1, "pull_request", ghPR("opened", 7)),
			status: 201, started: true, agent: "reviewer", runs: map[string]int{"reviewer": 1}},
		{name: "github event without a route for its action uses the bare event", send: gh(id1, "pull_request", ghPR("labeled", 7)),
			status: 201, started: true, agent: "triager", runs: map[string]int{"triager": 1}},
		{name: "github form-encoded", send: func() delivery {
			d := gh(id1, "issues", "")
			d.body = []byte(url.Values{"payload": {`{"action":"opened","issue":{"number":3},"repository":{"full_name":"octo/repo"}}`}}.Encode())
			d.contentType = "application/x-www-form-urlencoded"
			d.header["X-Hub-Signature-256"] = githubSig(ghSecret, d.body)
			return d
		}(), status: 201, started: true, agent: "triager", runs: map[string]int{"triager": 1}},
		{name: "github bad signature", send: gh(id1, "pull_request", ghPR("opened", 7)).with(func(d *delivery) {
			d.header["X-Hub-Signature-256"] = githubSig("wrong-secret", d.body)
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "github body changed after signing", send: gh(id1, "pull_request", ghPR("opened", 7)).with(func(d *delivery) {
			d.body = []byte(ghPR("opened", 8))
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "github missing signature", send: gh(id1, "pull_request", ghPR("opened", 7)).with(func(d *delivery) {
			delete(d.header, "X-Hub-Signature-256")
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "github malformed signature", send: gh(id1, "pull_request", ghPR("opened", 7)).with(func(d *delivery) {
			d.header["X-Hub-Signature-256"] = strings.Replace(d.header["X-Hub-Signature-256"], "sha256=", "sha1=", 1)
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "github unroutable", send: gh(id1, "ping", `{"zen":"Keep it logically awesome.","hook_id":1}`),
			status: 202, unchanged: true},
		{name: "github duplicate delivery", before: []delivery{gh(id1, "pull_request", ghPR("opened", 7))},
			send:   gh(id1, "pull_request", ghPR("opened", 7)),
			status: 201, started: true, agent: "reviewer", runs: map[string]int{"reviewer": 1}, unchanged: true, sameAsLast: true},
		{name: "github duplicate of an unroutable delivery", before: []delivery{gh(id1, "ping", `{}`)},
			send: gh(id1, "ping", `{}`), status: 202, unchanged: true, sameAsLast: true},
		{name: "github two deliveries of different PRs", before: []delivery{gh(id1, "pull_request", ghPR("opened", 7))},
			send:   gh(id2, "pull_request", ghPR("opened", 8)),
			status: 201, started: true, agent: "reviewer", runs: map[string]int{"reviewer": 2}},
		{name: "github delivery id reused with another body", before: []delivery{gh(id1, "pull_request", ghPR("opened", 7))},
			send:   gh(id1, "issues", `{"action":"opened","issue":{"number":9},"repository":{"full_name":"octo/repo"}}`),
			status: 409, code: "IDEMPOTENCY_CONFLICT", runs: map[string]int{"reviewer": 1}, unchanged: true},
		{name: "github oversized", send: gh(id1, "pull_request", `{"pad":"`+strings.Repeat("x", 5<<10)+`"}`),
			status: 413, code: "INPUT_TOO_LARGE", unchanged: true},
		{name: "github oversized without a length", send: func() delivery {
			d := gh(id1, "pull_request", `{"pad":"`+strings.Repeat("x", 5<<10)+`"}`)
			d.chunked = true
			return d
		}(), status: 413, code: "INPUT_TOO_LARGE", unchanged: true},
		{name: "github wrong method", send: gh(id1, "pull_request", ghPR("opened", 7)).with(func(d *delivery) { d.method = "GET"; d.body = nil }),
			status: 405, code: "METHOD_NOT_ALLOWED", unchanged: true},
		{name: "github wrong content type", send: gh(id1, "pull_request", ghPR("opened", 7)).with(func(d *delivery) { d.contentType = "text/plain" }),
			status: 415, code: "UNSUPPORTED_MEDIA_TYPE", unchanged: true},
		{name: "github missing delivery id", send: gh("", "pull_request", ghPR("opened", 7)),
			status: 400, code: "INVALID_REQUEST", unchanged: true},
		{name: "github delivery id that is a path", send: gh("../../x", "pull_request", ghPR("opened", 7)),
			status: 400, code: "INVALID_REQUEST", unchanged: true},
		{name: "github delivery id with a colon", send: gh("a:b", "pull_request", ghPR("opened", 7)),
			status: 400, code: "INVALID_REQUEST", unchanged: true},
		{name: "github missing event", send: gh(id1, "", ghPR("opened", 7)),
			status: 400, code: "INVALID_REQUEST", unchanged: true},
		{name: "github body not JSON", send: gh(id1, "pull_request", `[1,2]`),
			status: 400, code: "INVALID_REQUEST", unchanged: true},
		{name: "unknown source", send: gh(id1, "pull_request", ghPR("opened", 7)).with(func(d *delivery) { d.path = "/webhooks/gitlab" }),
			status: 404, code: "NOT_FOUND", unchanged: true},

		{name: "slack good", send: slackCmd(t0, "/research", "1234567890.123456"),
			status: 200, started: true, agent: "researcher", runs: map[string]int{"researcher": 1}},
		{name: "slack interactive payload", send: slackForm(t0, url.Values{"payload": {
			`{"type":"block_actions","trigger_id":"13345224609.738474920.8088930838d88f008e0","team":{"id":"T0001"},"user":{"id":"U42"}}`}}),
			status: 200, started: true, agent: "clicker", runs: map[string]int{"clicker": 1}},
		{name: "slack bad signature", send: slackCmd(t0, "/research", "1.1").with(func(d *delivery) {
			d.header["X-Slack-Signature"] = slackSig("wrong", d.header["X-Slack-Request-Timestamp"], d.body)
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "slack signature of another timestamp", send: slackCmd(t0, "/research", "1.1").with(func(d *delivery) {
			d.header["X-Slack-Request-Timestamp"] = "1771056001"
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "slack missing signature", send: slackCmd(t0, "/research", "1.1").with(func(d *delivery) {
			delete(d.header, "X-Slack-Signature")
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "slack missing timestamp", send: slackCmd(t0, "/research", "1.1").with(func(d *delivery) {
			delete(d.header, "X-Slack-Request-Timestamp")
		}), status: 401, code: "WEBHOOK_SIGNATURE_INVALID", unchanged: true},
		{name: "slack stale timestamp", send: slackCmd(t0.Add(-5*time.Minute-time.Second), "/research", "1.1"),
			status: 401, code: "WEBHOOK_STALE", unchanged: true},
		{name: "slack future timestamp", send: slackCmd(t0.Add(5*time.Minute+time.Second), "/research", "1.1"),
			status: 401, code: "WEBHOOK_STALE", unchanged: true},
		{name: "slack timestamp at the window's edge", send: slackCmd(t0.Add(-5*time.Minute), "/research", "1.1"),
			status: 200, started: true, agent: "researcher", runs: map[string]int{"researcher": 1}},
		{name: "slack duplicate trigger", before: []delivery{slackCmd(t0, "/research", "1.1")},
			send:   slackCmd(t0.Add(-time.Second), "/research", "1.1"),
			status: 200, started: true, agent: "researcher", runs: map[string]int{"researcher": 1}, unchanged: true, sameAsLast: true},
		{name: "slack same trigger id in another team", before: []delivery{slackCmd(t0, "/research", "1.1")},
			send: func() delivery {
				d := slackCmd(t0, "/research", "1.1")
				form, _ := url.ParseQuery(string(d.body))
				form.Set("team_id", "T0002")
				return slackForm(t0, form)
			}(), status: 200, started: true, agent: "researcher", runs: map[string]int{"researcher": 2}},
		{name: "slack unroutable", send: slackCmd(t0, "/unknown", "1.1"), status: 200, unchanged: true},
		{name: "slack missing trigger id", send: slackCmd(t0, "/research", ""),
			status: 400, code: "INVALID_REQUEST", unchanged: true},
		{name: "github invalid UTF-8 in a field", send: gh(id1, "pull_request", "{\"action\":\"opened\",\"number\":7,\"repository\":{\"full_name\":\"octo/\xc3\x28\"}}"),
			status: 400, code: "INVALID_INPUT", unchanged: true},
		{name: "github lone surrogate in a field", send: gh(id1, "pull_request", `{"action":"opened","number":7,"sender":{"login":"\udc00"}}`),
			status: 400, code: "INVALID_INPUT", unchanged: true},
		{name: "slack wrong content type", send: slackCmd(t0, "/research", "1.1").with(func(d *delivery) { d.contentType = "text/plain" }),
			status: 415, code: "UNSUPPORTED_MEDIA_TYPE", unchanged: true},
		{name: "slack wrong method", send: slackCmd(t0, "/research", "1.1").with(func(d *delivery) { d.method = "PUT" }),
			status: 405, code: "METHOD_NOT_ALLOWED", unchanged: true},
		{name: "slack oversized", send: slackForm(t0, url.Values{"command": {"/research"}, "text": {strings.Repeat("x", 5<<10)}}),
			status: 413, code: "INPUT_TOO_LARGE", unchanged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			var last reply
			for _, d := range tt.before {
				if last = r.send(d); last.status >= 300 {
					t.Fatalf("earlier delivery: %d %s", last.status, last.raw)
				}
			}
			before := teststores.Snapshot(t, storage.New(r.store))
			got := r.send(tt.send)
			if got.status != tt.status || got.code != tt.code {
				t.Fatalf("answer %d %q (%s), want %d %q", got.status, got.code, got.raw, tt.status, tt.code)
			}
			if tt.code != "" {
				if msg, _ := got.body["message"].(string); msg == "" || len(got.body) != 2 {
					t.Errorf("error body %s, want {code, message}", got.raw)
				}
			} else if got.started != tt.started || got.agent != tt.agent || (got.runID != "") != tt.started {
				t.Errorf("answer %s, want started %v agent %q", got.raw, tt.started, tt.agent)
			}
			if tt.status == 405 && got.header.Get("Allow") != "POST" {
				t.Errorf("Allow %q, want POST", got.header.Get("Allow"))
			}
			if tt.sameAsLast {
				if got.status != last.status || got.raw != last.raw || !got.duplicate && tt.started {
					t.Errorf("duplicate answered %d %s (duplicate header %v), want the first's %d %s", got.status, got.raw, got.duplicate, last.status, last.raw)
				}
			}
			if runs := r.runs(); !maps.Equal(runs, tt.runs) && !(len(runs) == 0 && len(tt.runs) == 0) {
				t.Errorf("runs %v, want %v", runs, tt.runs)
			}
			if tt.unchanged {
				teststores.Unchanged(t, storage.New(r.store), before)
			} else if tt.started {
				in := r.input(got.agent, got.runID)
				if got, _ := in["delivery"].(string); strings.HasPrefix(tt.send.path, "/webhooks/github") && got == "" {
					t.Errorf("input %v has no delivery", in)
				}
			}
		})
	}
}

// TestInputs pins the run's input of each source, the documented JSON.
func TestInputs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	a := r.send(gh("d-1", "pull_request", ghPR("opened", 7)))
	want := map[string]any{"event": "pull_request", "action": "opened", "delivery": "d-1", "repository": "octo/repo", "number": float64(7), "sender": "mona"}
	if in := r.input(a.agent, a.runID); !maps.Equal(in, want) {
		t.Errorf("github input %v, want %v", in, want)
	}
	s := r.send(slackCmd(t0, "/research", "1.1"))
	want = map[string]any{"type": "slash_command", "team_id": "T0001", "user_id": "U42", "channel_id": "C7", "command": "/research",
		"text": "quantum error correction", "trigger_id": "1.1", "response_url": "https://hooks.slack.com/commands/T0001/1/x"}
	if in := r.input(s.agent, s.runID); !maps.Equal(in, want) {
		t.Errorf("slack input %v, want %v", in, want)
	}
	st, err := r.runner.Status(context.Background(), a.runID)
	if err != nil || st.IdempotencyKey != "github:d-1" || st.Trigger != "event" {
		t.Errorf("status %+v, %v", st, err)
	}
}

// TestSecondaryDedupe: two deliveries of the same PR and event type within
// 5 s start one run, and the second is answered with the first's answer;
// after 5 s a delivery starts a second run (docs/spec.md#idempotency).
func TestSecondaryDedupe(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	sync1 := r.send(gh("d-1", "pull_request", ghPR("synchronize", 7)))
	r.clk.Advance(2 * time.Second)
	sync2 := r.send(gh("d-2", "pull_request", ghPR("synchronize", 7)))
	if sync2.status != 201 || sync2.raw != sync1.raw || !sync2.duplicate {
		t.Fatalf("second delivery within 5 s: %d %s (duplicate %v), want the first's %s", sync2.status, sync2.raw, sync2.duplicate, sync1.raw)
	}
	// Another PR, another action of the same PR, another repository: own runs.
	other := []delivery{
		gh("d-3", "pull_request", ghPR("synchronize", 8)),
		gh("d-4", "pull_request", ghPR("labeled", 7)),
		gh("d-5", "pull_request", strings.Replace(ghPR("synchronize", 7), "octo/repo", "octo/other", 1)),
	}
	for _, d := range other {
		if a := r.send(d); a.status != 201 || a.duplicate || a.runID == sync1.runID {
			t.Errorf("delivery %s: %d %s (duplicate %v), want a run of its own", d.header["X-GitHub-Delivery"], a.status, a.raw, a.duplicate)
		}
	}
	if got := r.runs()["triager"]; got != 4 {
		t.Fatalf("%d runs, want 4", got)
	}

	r.clk.Advance(3 * time.Second) // 5 s after the first: its window is over
	sync3 := r.send(gh("d-6", "pull_request", ghPR("synchronize", 7)))
	if sync3.status != 201 || sync3.duplicate || sync3.runID == sync1.runID {
		t.Fatalf("delivery after 5 s: %d %s, want a second run", sync3.status, sync3.raw)
	}
	// Redeliveries keep their answers: d-1 its run, though the window is
	// d-6's now; d-2 the run it was absorbed into, though its window is over.
	r.clk.Advance(time.Minute)
	before := teststores.Snapshot(t, storage.New(r.store))
	if a := r.send(gh("d-1", "pull_request", ghPR("synchronize", 7))); a.raw != sync1.raw || !a.duplicate {
		t.Errorf("redelivery of d-1: %s, want %s", a.raw, sync1.raw)
	}
	if a := r.send(gh("d-2", "pull_request", ghPR("synchronize", 7))); a.raw != sync1.raw || !a.duplicate {
		t.Errorf("redelivery of d-2: %s, want %s", a.raw, sync1.raw)
	}
	teststores.Unchanged(t, storage.New(r.store), before)
	if got := r.runs()["triager"]; got != 5 {
		t.Errorf("%d runs, want 5", got)
	}
}

// TestSecondaryDedupeRace: deliveries of one PR and event from many
// processes at once start one run; the create-only claim of the window
// decides. Each answer is that run's or, while its run is not yet created,
// 202 without a run.
func TestSecondaryDedupeRace(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// Handlers of other "processes" on the same store and Runner.
	var hs []http.Handler
	for range 4 {
		h, err := webhook.New(webhook.Config{Runner: r.runner, Store: storage.New(r.store), Clock: r.clk, GitHubSecret: ghSecret, Routes: testRoutes[:3]})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	const n = 16
	answers := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d := gh("race-"+string(rune('a'+i)), "pull_request", ghPR("synchronize", 7))
			answers[i] = r.serve(hs[i%len(hs)], d)
		})
	}
	wg.Wait()
	if got := r.runs()["triager"]; got != 1 {
		t.Fatalf("%d runs, want 1", got)
	}
	runs, _ := r.runner.Runs(context.Background(), "triager")
	for i, a := range answers {
		switch {
		case a.status == 201 && a.runID == runs[0].RunID:
		case a.status == 202 && !a.started && a.duplicate:
		default:
			t.Errorf("delivery %d: %d %s", i, a.status, a.raw)
		}
	}
}

// TestIdempotencyTTLs: the keys' records carry the TTLs of docs/spec.md#idempotency, which
// are the Runner's: a completed key lives 24 h.
func TestIdempotencyTTLs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	g := r.send(gh("d-1", "pull_request", ghPR("opened", 7)))
	s := r.send(slackCmd(t0, "/research", "1.1"))
	for key, runID := range map[string]string{"github:d-1": g.runID, "slack:T0001:1.1": s.runID} {
		rec, err := idemrecord.Read(ctx, storage.New(r.store), r.clk.Now(), key)
		if err != nil || rec.RunID != runID || rec.Status != idemrecord.Completed || rec.ExpiresAt.Sub(rec.UpdatedAt) != 24*time.Hour {
			t.Errorf("%s: %+v, %v; want completed for 24 h with run %s", key, rec, err, runID)
		}
	}
	// A day later the GitHub key is free again: a redelivery starts a run.
	r.clk.Advance(24*time.Hour + time.Second)
	if a := r.send(gh("d-1", "pull_request", ghPR("opened", 7))); a.status != 201 || a.duplicate || a.runID == g.runID {
		t.Errorf("redelivery after the TTL: %d %s", a.status, a.raw)
	}
}

// TestSlackTriggerValidity: a trigger id answers its run for the 30 minutes
// Slack keeps it valid, even with a Runner whose completed TTL is shorter.
func TestSlackTriggerValidity(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *run.Config, _ *webhook.Config) { c.IdempotencyCompletedTTL = 10 * time.Minute })
	first := r.send(slackCmd(t0, "/research", "1.1"))
	r.clk.Advance(20 * time.Minute)
	if _, err := idemrecord.Read(context.Background(), storage.New(r.store), r.clk.Now(), "slack:T0001:1.1"); !errors.Is(err, lifecycle.ErrIdempotencyExpired) {
		t.Fatalf("the Runner's record: %v, want expired", err)
	}
	before := teststores.Snapshot(t, storage.New(r.store))
	again := r.send(slackCmd(r.clk.Now(), "/research", "1.1"))
	if again.raw != first.raw || !again.duplicate {
		t.Errorf("the trigger 20 min later: %s, want the first's %s", again.raw, first.raw)
	}
	teststores.Unchanged(t, storage.New(r.store), before)
	r.clk.Advance(10*time.Minute + time.Second)
	if late := r.send(slackCmd(r.clk.Now(), "/research", "1.1")); late.status != 200 || late.duplicate || late.runID == first.runID {
		t.Errorf("the trigger after 30 min: %s, want a new run", late.raw)
	}
}

// TestSourceWithoutSecret: a source without a secret is not served.
func TestSourceWithoutSecret(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(_ *run.Config, w *webhook.Config) { w.SlackSigningSecret = ""; w.Routes = testRoutes[:3] })
	before := teststores.Snapshot(t, storage.New(r.store))
	if a := r.send(slackCmd(t0, "/research", "1.1")); a.status != 404 || a.code != "NOT_FOUND" {
		t.Errorf("slack without a secret: %d %s", a.status, a.raw)
	}
	teststores.Unchanged(t, storage.New(r.store), before)
}

// TestNewRefusesBadConfig: routes that could never be served are refused.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	base := webhook.Config{Runner: r.runner, Store: storage.New(r.store), GitHubSecret: ghSecret, SlackSigningSecret: slackSecret}
	tests := map[string]func(*webhook.Config){
		"no runner":            func(c *webhook.Config) { c.Runner = nil },
		"github without store": func(c *webhook.Config) { c.Store = nil },
		"negative body limit":  func(c *webhook.Config) { c.MaxBodyBytes = -1 },
		"unknown source": func(c *webhook.Config) {
			c.Routes = []webhook.Route{{Source: "gitlab", Event: "push", Agent: "reviewer"}}
		},
		"unknown agent": func(c *webhook.Config) {
			c.Routes = []webhook.Route{{Source: "github", Event: "push", Agent: "nobody"}}
		},
		"bad github event": func(c *webhook.Config) {
			c.Routes = []webhook.Route{{Source: "github", Event: "Pull Request", Agent: "reviewer"}}
		},
		"bad slack event": func(c *webhook.Config) {
			c.Routes = []webhook.Route{{Source: "slack", Event: "/a b", Agent: "reviewer"}}
		},
		"route without secret": func(c *webhook.Config) { c.SlackSigningSecret = ""; c.Routes = testRoutes },
		"event routed twice":   func(c *webhook.Config) { c.Routes = append(testRoutes[:1:1], testRoutes[0]) },
		"github action missing": func(c *webhook.Config) {
			c.Routes = []webhook.Route{{Source: "github", Event: "pull_request.", Agent: "reviewer"}}
		},
	}
	for name, mutate := range tests {
		cfg := base
		mutate(&cfg)
		if _, err := webhook.New(cfg); !errors.Is(err, webhook.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := webhook.New(base); err != nil {
		t.Errorf("no routes: %v", err)
	}
}

// TestPoisonDedupeRecords: an undecodable window or absorbed record is only
// a lost hint; it neither blocks its subject nor fails the delivery.
func TestPoisonDedupeRecords(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	wkey := layout.GitHubWindowKey("octo/repo", 7, "pull_request.synchronize")
	akey, _ := layout.GitHubDeliveryKey("d-2")
	for _, k := range []string{wkey, akey} {
		if _, err := r.store.Put(ctx, k, []byte("{not json"), storage.IfNotExists()); err != nil {
			t.Fatal(err)
		}
	}
	first := r.send(gh("d-1", "pull_request", ghPR("synchronize", 7)))
	second := r.send(gh("d-2", "pull_request", ghPR("synchronize", 7)))
	if first.status != 201 || first.duplicate || second.raw != first.raw || !second.duplicate {
		t.Fatalf("over poison records: %d %s, then %d %s", first.status, first.raw, second.status, second.raw)
	}
	if got := r.runs()["triager"]; got != 1 {
		t.Errorf("%d runs, want 1", got)
	}
}

// TestSlackEvents: the Events API's JSON requests, signed as every Slack
// request (issue 18 defect 9: each was refused 415, so /webhooks/slack could
// not be registered as an Events API request URL).
func TestSlackEvents(t *testing.T) {
	t.Parallel()
	t.Run("url_verification is answered with its challenge, nothing written", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		before := teststores.Snapshot(t, storage.New(r.store))
		got := r.send(slackJSON(t0, `{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`))
		if got.status != 200 || got.body["challenge"] != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
			t.Errorf("answer %d %s, want 200 with the challenge", got.status, got.raw)
		}
		teststores.Unchanged(t, storage.New(r.store), before)
	})
	t.Run("url_verification unsigned is refused", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		d := slackJSON(t0, `{"challenge":"c","type":"url_verification"}`).with(func(d *delivery) {
			d.header["X-Slack-Signature"] = slackSig("wrong-secret", d.header["X-Slack-Request-Timestamp"], d.body)
		})
		if got := r.send(d); got.status != 401 || got.code != "WEBHOOK_SIGNATURE_INVALID" || got.body["challenge"] != nil {
			t.Errorf("answer %d %s, want 401 WEBHOOK_SIGNATURE_INVALID", got.status, got.raw)
		}
	})
	t.Run("event_callback starts its route's run once; Slack's retries are duplicates", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		first := r.send(slackEvent(t0, "Ev0PV52K21", "app_mention"))
		if first.status != 200 || !first.started || first.agent != "researcher" || first.duplicate {
			t.Fatalf("first delivery: %d %s", first.status, first.raw)
		}
		in := r.input("researcher", first.runID)
		want := map[string]any{"type": "event_callback", "event_type": "app_mention", "event_id": "Ev0PV52K21", "team_id": "T0001",
			"user_id": "U42", "channel_id": "C7", "text": "<@U0BOT> research violins", "event_ts": "1771056000.000100"}
		if !maps.Equal(in, want) {
			t.Errorf("input %v, want %v", in, want)
		}
		before := teststores.Snapshot(t, storage.New(r.store))
		for n := 1; n <= 3; n++ {
			r.clk.Advance(time.Minute)
			retry := slackEvent(r.clk.Now(), "Ev0PV52K21", "app_mention").with(func(d *delivery) {
				d.header["X-Slack-Retry-Num"] = strconv.Itoa(n)
				d.header["X-Slack-Retry-Reason"] = "http_timeout"
			})
			got := r.send(retry)
			if got.status != 200 || got.runID != first.runID || !got.duplicate {
				t.Errorf("retry %d: %d %s, want the first's run as a duplicate", n, got.status, got.raw)
			}
		}
		teststores.Unchanged(t, storage.New(r.store), before)
		if runs := r.runs(); !maps.Equal(runs, map[string]int{"researcher": 1}) {
			t.Errorf("runs %v, want one", runs)
		}
		// Another event is another run.
		if other := r.send(slackEvent(r.clk.Now(), "Ev0PV52K22", "app_mention")); !other.started || other.runID == first.runID || other.duplicate {
			t.Errorf("another event: %s", other.raw)
		}
	})
	t.Run("an event without a route starts nothing", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		before := teststores.Snapshot(t, storage.New(r.store))
		got := r.send(slackEvent(t0, "Ev1", "reaction_added"))
		if got.status != 200 || got.started || got.body["reason"] == "" {
			t.Errorf("answer %d %s, want 200 started false", got.status, got.raw)
		}
		teststores.Unchanged(t, storage.New(r.store), before)
	})
	t.Run("app_rate_limited is acknowledged", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		before := teststores.Snapshot(t, storage.New(r.store))
		got := r.send(slackJSON(t0, `{"token":"x","type":"app_rate_limited","team_id":"T0001","minute_rate_limited":1518467820,"api_app_id":"A1"}`))
		if got.status != 200 || got.started {
			t.Errorf("answer %d %s, want 200", got.status, got.raw)
		}
		teststores.Unchanged(t, storage.New(r.store), before)
	})
	bad := []struct {
		name, body, code string
	}{
		{"not JSON", `{"type":`, "INVALID_REQUEST"},
		{"unknown type", `{"type":"block_actions"}`, "INVALID_REQUEST"},
		{"event without an id", `{"type":"event_callback","team_id":"T0001","event":{"type":"app_mention"}}`, "INVALID_REQUEST"},
		{"event id not an id", `{"type":"event_callback","team_id":"T0001","event_id":"../x","event":{"type":"app_mention"}}`, "INVALID_REQUEST"},
		{"event without a type", `{"type":"event_callback","team_id":"T0001","event_id":"Ev1","event":{}}`, "INVALID_REQUEST"},
		{"challenge missing", `{"type":"url_verification"}`, "INVALID_REQUEST"},
		{"invalid UTF-8 text", "{\"type\":\"event_callback\",\"team_id\":\"T0001\",\"event_id\":\"Ev1\",\"event\":{\"type\":\"app_mention\",\"text\":\"\xc3\x28\"}}", "INVALID_INPUT"},
		{"lone surrogate text", `{"type":"event_callback","team_id":"T0001","event_id":"Ev1","event":{"type":"app_mention","text":"\ud800"}}`, "INVALID_INPUT"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			before := teststores.Snapshot(t, storage.New(r.store))
			if got := r.send(slackJSON(t0, tt.body)); got.status != 400 || got.code != tt.code {
				t.Errorf("answer %d %s, want 400 %s", got.status, got.raw, tt.code)
			}
			teststores.Unchanged(t, storage.New(r.store), before)
		})
	}
	t.Run("slash commands and interactivity still work", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		if got := r.send(slackCmd(t0, "/research", "1.1")); got.status != 200 || !got.started || got.agent != "researcher" {
			t.Errorf("slash command: %d %s", got.status, got.raw)
		}
		// A form value is percent-decoded to any bytes: invalid UTF-8 in the
		// text is refused, not stored as U+FFFD.
		form := url.Values{"team_id": {"T0001"}, "command": {"/research"}, "text": {"\xc3\x28"}, "trigger_id": {"3.3"}}
		before := teststores.Snapshot(t, storage.New(r.store))
		if got := r.send(slackForm(t0, form)); got.status != 400 || got.code != "INVALID_INPUT" {
			t.Errorf("slash command with invalid UTF-8: %d %s", got.status, got.raw)
		}
		teststores.Unchanged(t, storage.New(r.store), before)
		payload := `{"type":"block_actions","trigger_id":"2.2","team":{"id":"T0001"},"user":{"id":"U42"}}`
		if got := r.send(slackForm(t0, url.Values{"payload": {payload}})); got.status != 200 || !got.started || got.agent != "clicker" {
			t.Errorf("interactivity: %d %s", got.status, got.raw)
		}
	})
}
