package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runconveyor/conveyor/adapters/httpapi/internal/webhook"
	"github.com/runconveyor/conveyor/adapters/memstore"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/lifecycle/clock"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
	"github.com/runconveyor/conveyor/storage/driver"
)

const (
	ghSecret    = "gh-secret"
	slackSecret = "slack-secret"
)

var t0 = time.Date(2026, 2, 14, 8, 0, 0, 0, time.UTC)

// The agents the rig's routes start.
var testAgents = []string{"reviewer", "triager", "researcher", "clicker"}

var testRoutes = []webhook.Route{
	{Source: "github", Event: "pull_request.opened", Agent: "reviewer"},
	{Source: "github", Event: "pull_request", Agent: "triager"},
	{Source: "github", Event: "issues", Agent: "triager"},
	{Source: "slack", Event: "/research", Agent: "researcher"},
	{Source: "slack", Event: "block_actions", Agent: "clicker"},
	{Source: "slack", Event: "app_mention", Agent: "researcher"},
}

// rig is a real Runner on a memstore behind a Handler served on 127.0.0.1;
// the Runner is not run: the tests look at the runs the intake creates.
type rig struct {
	t      testing.TB
	store  *writeCounter
	clk    *clock.Fake
	runner *run.Runner
	h      *webhook.Handler
	srv    *httptest.Server
}

type rigOption func(*run.Config, *webhook.Config)

func newRig(t testing.TB, opts ...rigOption) *rig {
	t.Helper()
	r := &rig{t: t, store: &writeCounter{Store: memstore.New()}, clk: clock.NewFake(t0)}
	rcfg := run.Config{Store: storage.New(r.store), Clock: r.clk, Owner: "test", Logger: slog.New(slog.DiscardHandler)}
	wcfg := webhook.Config{Store: storage.New(r.store), Clock: r.clk, GitHubSecret: ghSecret, SlackSigningSecret: slackSecret,
		Routes: testRoutes, MaxBodyBytes: 4 << 10, Logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&rcfg, &wcfg)
	}
	var agents []run.Agent
	for _, slug := range testAgents {
		agents = append(agents, run.Agent{Slug: slug, Steps: []run.Step{{Name: "work", Run: func(context.Context, run.StepInput) (run.StepOutput, error) {
			return run.StepOutput{}, nil
		}}}})
	}
	var err error
	if r.runner, err = run.NewRunner(rcfg, agents...); err != nil {
		t.Fatal(err)
	}
	wcfg.Runner = r.runner
	if r.h, err = webhook.New(wcfg); err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(r.h)
	t.Cleanup(r.srv.Close)
	return r
}

// writeCounter counts the writes a store accepted (a refused conditional
// Put is no write).
type writeCounter struct {
	driver.Store
	writes atomic.Int64
}

func (c *writeCounter) Put(ctx context.Context, key string, value []byte, cond storage.Condition) (storage.Version, error) {
	v, err := c.Store.Put(ctx, key, value, cond)
	if err == nil {
		c.writes.Add(1)
	}
	return v, err
}

func (c *writeCounter) Delete(ctx context.Context, key string, cond storage.Condition) error {
	err := c.Store.Delete(ctx, key, cond)
	if err == nil {
		c.writes.Add(1)
	}
	return err
}

// delivery is one request to the handler.
type delivery struct {
	method, path, contentType string
	header                    map[string]string
	body                      []byte
	chunked                   bool // no Content-Length
}

func githubSig(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func slackSig(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":"))
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// ghPR is a pull_request payload.
func ghPR(action string, number int) string {
	return `{"action":"` + action + `","number":` + strconv.Itoa(number) +
		`,"pull_request":{"number":` + strconv.Itoa(number) + `,"title":"Fix"},"repository":{"full_name":"octo/repo"},"sender":{"login":"mona"}}`
}

// gh is a GitHub delivery signed with the rig's secret.
func gh(id, event, payload string) delivery {
	body := []byte(payload)
	return delivery{method: "POST", path: "/webhooks/github", contentType: "application/json", body: body,
		header: map[string]string{"X-GitHub-Event": event, "X-GitHub-Delivery": id, "X-Hub-Signature-256": githubSig(ghSecret, body)}}
}

// slackCmd is a slash command signed with the rig's secret at time at.
func slackCmd(at time.Time, command, trigger string) delivery {
	form := url.Values{"team_id": {"T0001"}, "user_id": {"U42"}, "channel_id": {"C7"}, "command": {command},
		"text": {"quantum error correction"}, "trigger_id": {trigger}, "response_url": {"https://hooks.slack.com/commands/T0001/1/x"}}
	return slackForm(at, form)
}

func slackForm(at time.Time, form url.Values) delivery {
	body := []byte(form.Encode())
	ts := strconv.FormatInt(at.Unix(), 10)
	return delivery{method: "POST", path: "/webhooks/slack", contentType: "application/x-www-form-urlencoded", body: body,
		header: map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": slackSig(slackSecret, ts, body)}}
}

// slackJSON is an Events API request signed with the rig's secret at time
// at.
func slackJSON(at time.Time, body string) delivery {
	ts := strconv.FormatInt(at.Unix(), 10)
	return delivery{method: "POST", path: "/webhooks/slack", contentType: "application/json", body: []byte(body),
		header: map[string]string{"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": slackSig(slackSecret, ts, []byte(body))}}
}

// slackEvent is an event_callback of an event of type typ, as the Events
// API sends it.
func slackEvent(at time.Time, eventID, typ string) delivery {
	return slackJSON(at, `{"token":"x","team_id":"T0001","api_app_id":"A1","type":"event_callback","event_id":"`+eventID+
		`","event_time":1771056000,"event":{"type":"`+typ+`","user":"U42","text":"<@U0BOT> research violins","ts":"1771056000.000100","channel":"C7","event_ts":"1771056000.000100"}}`)
}

func (d delivery) with(f func(*delivery)) delivery {
	h := map[string]string{}
	for k, v := range d.header {
		h[k] = v
	}
	d.header = h
	f(&d)
	return d
}

// reply is an answer as the test reads it.
type reply struct {
	status    int
	header    http.Header
	raw       string
	body      map[string]any
	code      string
	started   bool
	runID     string
	agent     string
	duplicate bool
}

func (r *rig) send(d delivery) reply {
	r.t.Helper()
	var body io.Reader = bytes.NewReader(d.body)
	if d.chunked {
		body = io.MultiReader(bytes.NewReader(d.body)) // hides the length
	}
	req, err := http.NewRequest(d.method, r.srv.URL+d.path, body)
	if err != nil {
		r.t.Fatal(err)
	}
	if d.contentType != "" {
		req.Header.Set("Content-Type", d.contentType)
	}
	for k, v := range d.header {
		req.Header.Set(k, v)
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return parseReply(r.t, resp.StatusCode, resp.Header, raw)
}

// serve hands a delivery to h directly, from any goroutine: it does not
// fail the test, its caller judges the reply.
func (r *rig) serve(h http.Handler, d delivery) reply {
	req := httptest.NewRequest(d.method, d.path, bytes.NewReader(d.body))
	req.Header.Set("Content-Type", d.contentType)
	for k, v := range d.header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return parseReply(nil, w.Code, w.Header(), w.Body.Bytes())
}

func parseReply(t testing.TB, status int, header http.Header, raw []byte) reply {
	rep := reply{status: status, header: header, raw: string(raw)}
	if err := json.Unmarshal(raw, &rep.body); err != nil && t != nil {
		t.Fatalf("answer %d is not JSON: %q", status, raw)
	}
	rep.code, _ = rep.body["code"].(string)
	rep.started, _ = rep.body["started"].(bool)
	rep.runID, _ = rep.body["run_id"].(string)
	rep.agent, _ = rep.body["agent"].(string)
	rep.duplicate = header.Get(webhook.DuplicateHeader) == "true"
	return rep
}

// runs counts the runs of every agent, by agent.
func (r *rig) runs() map[string]int {
	r.t.Helper()
	out := map[string]int{}
	for _, slug := range testAgents {
		st, err := r.runner.Runs(context.Background(), slug)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(st) > 0 {
			out[slug] = len(st)
		}
		for _, s := range st {
			if s.Trigger != "event" {
				r.t.Errorf("run %s has trigger %q, want event", s.RunID, s.Trigger)
			}
		}
	}
	return out
}

// input reads a run's stored input.
func (r *rig) input(agent, runID string) map[string]any {
	r.t.Helper()
	k, err := layout.RunInputKey(agent, runID)
	if err != nil {
		r.t.Fatal(err)
	}
	b, _, err := r.store.Get(context.Background(), k)
	if err != nil {
		r.t.Fatalf("input of %s: %v", runID, err)
	}
	var in map[string]any
	if err := json.Unmarshal(b, &in); err != nil {
		r.t.Fatal(err)
	}
	return in
}
