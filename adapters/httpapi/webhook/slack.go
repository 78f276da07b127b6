package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
	"github.com/runconveyor/conveyor/storage"
)

// Slack's headers.
const (
	slackSignatureHeader = "X-Slack-Signature"
	slackTimestampHeader = "X-Slack-Request-Timestamp"
)

// slackInput is a Slack run's input. ResponseURL lets the agent answer in
// the channel (Slack accepts answers there for 30 minutes).
type slackInput struct {
	Type        string `json:"type"`
	TeamID      string `json:"team_id"`
	UserID      string `json:"user_id,omitempty"`
	ChannelID   string `json:"channel_id,omitempty"`
	Command     string `json:"command,omitempty"`
	Text        string `json:"text,omitempty"`
	TriggerID   string `json:"trigger_id"`
	ResponseURL string `json:"response_url,omitempty"`
}

// event is what a route names: the command, or the payload's type.
func (in slackInput) event() string {
	if in.Type == slackCommandType {
		return in.Command
	}
	return in.Type
}

const slackCommandType = "slash_command"

// slackAnswer is Slack's 200 body: Slack shows text to the user who sent
// the command (ephemeral), and ignores the other fields.
type slackAnswer struct {
	ResponseType string `json:"response_type"`
	Text         string `json:"text"`
	Started      bool   `json:"started"`
	RunID        string `json:"run_id,omitempty"`
	Agent        string `json:"agent,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

func slackStarted(runID, agent string, duplicate bool) answer {
	return answer{status: http.StatusOK, duplicate: duplicate, body: slackAnswer{
		ResponseType: "ephemeral", Text: fmt.Sprintf("Started %s (run %s).", agent, runID),
		Started: true, RunID: runID, Agent: agent,
	}}
}

// verifySlack checks the signature over "v0:{timestamp}:{body}" in constant
// time, then the timestamp against now: a signed request from outside the
// replay window is a replay (WEBHOOK_STALE). A missing or malformed
// timestamp fails the signature, which covers it.
func verifySlack(secret, timestamp, signature string, body []byte, now time.Time) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || timestamp == "" || len(timestamp) > 12 || strings.TrimLeft(timestamp, "0123456789") != "" {
		return webhookErr(lifecycle.CodeWebhookSignatureInvalid, "%s is missing or not Unix seconds", slackTimestampHeader)
	}
	if signature == "" {
		return webhookErr(lifecycle.CodeWebhookSignatureInvalid, "no %s header", slackSignatureHeader)
	}
	hexSig, ok := strings.CutPrefix(signature, "v0=")
	got, err := hex.DecodeString(hexSig)
	if !ok || err != nil || len(got) != sha256.Size {
		return webhookErr(lifecycle.CodeWebhookSignatureInvalid, "%s is not v0=<64 hex digits>", slackSignatureHeader)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + timestamp + ":"))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return webhookErr(lifecycle.CodeWebhookSignatureInvalid, "%s does not match the body", slackSignatureHeader)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > ReplayWindow || d < -ReplayWindow {
		return webhookErr(lifecycle.CodeWebhookStale, "%s is %s from the server's clock, over %s", slackTimestampHeader, d.Round(time.Second), ReplayWindow)
	}
	return nil
}

// slackPayload is the part of an interactive payload the intake reads.
type slackPayload struct {
	Type      string `json:"type"`
	TriggerID string `json:"trigger_id"`
	Team      *struct {
		ID string `json:"id"`
	} `json:"team"`
	User *struct {
		ID string `json:"id"`
	} `json:"user"`
	Channel *struct {
		ID string `json:"id"`
	} `json:"channel"`
	ResponseURL string `json:"response_url"`
}

// parseSlack reads an authenticated form body: a slash command's fields, or
// an interactive request's payload field.
func parseSlack(body []byte) (slackInput, error) {
	bad := func(format string, args ...any) (slackInput, error) {
		return slackInput{}, webhookErr(lifecycle.CodeInvalidRequest, format, args...)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return bad("the body is not a form: %v", err)
	}
	var in slackInput
	if ps, ok := form["payload"]; ok {
		var p slackPayload
		if len(ps) != 1 || json.Unmarshal([]byte(ps[0]), &p) != nil {
			return bad("payload is not one JSON object")
		}
		in = slackInput{Type: p.Type, TriggerID: p.TriggerID, ResponseURL: p.ResponseURL}
		if p.Team != nil {
			in.TeamID = p.Team.ID
		}
		if p.User != nil {
			in.UserID = p.User.ID
		}
		if p.Channel != nil {
			in.ChannelID = p.Channel.ID
		}
		if !validName(in.Type) {
			return bad("payload type %q is not a type name", truncate(in.Type))
		}
	} else {
		in = slackInput{Type: slackCommandType, TeamID: form.Get("team_id"), UserID: form.Get("user_id"),
			ChannelID: form.Get("channel_id"), Command: form.Get("command"), Text: form.Get("text"),
			TriggerID: form.Get("trigger_id"), ResponseURL: form.Get("response_url")}
		if !validSlackEvent(in.Command) || !strings.HasPrefix(in.Command, "/") {
			return bad("command %q is not a slash command", truncate(in.Command))
		}
	}
	if !validKeyPart(in.TeamID) {
		return bad("team_id %q is not an id (1 to 128 bytes of [A-Za-z0-9._-])", truncate(in.TeamID))
	}
	if !validKeyPart(in.TriggerID) {
		return bad("trigger_id %q is not an id (1 to 128 bytes of [A-Za-z0-9._-])", truncate(in.TriggerID))
	}
	// The user and channel become the run's caller and input: ids or
	// nothing.
	for field, v := range map[string]string{"user_id": in.UserID, "channel_id": in.ChannelID} {
		if v != "" && !validKeyPart(v) {
			return bad("%s %q is not an id", field, truncate(v))
		}
	}
	if err := lifecycle.CheckText("response_url", in.ResponseURL, lifecycle.MaxURLBytes, lifecycle.OneLine); err != nil {
		return bad("%v", err)
	}
	return in, nil
}

// slack answers POST /webhooks/slack.
func (h *Handler) slack(w http.ResponseWriter, r *http.Request) (answer, error) {
	if _, err := checkMediaType(r, "application/x-www-form-urlencoded"); err != nil {
		return answer{}, err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return answer{}, err
	}
	if err := verifySlack(h.cfg.SlackSigningSecret, r.Header.Get(slackTimestampHeader), r.Header.Get(slackSignatureHeader), body, h.clock.Now()); err != nil {
		return answer{}, err
	}
	in, err := parseSlack(body)
	if err != nil {
		return answer{}, err
	}
	ctx := r.Context()
	agent := h.route(SourceSlack, in.event())
	if agent == "" {
		reason := fmt.Sprintf("no route for slack event %q", in.event())
		a := answer{status: http.StatusOK, body: slackAnswer{ResponseType: "ephemeral",
			Text: fmt.Sprintf("Nothing handles %s here.", in.event()), Reason: reason}}
		h.logStarted(ctx, SourceSlack, "", in.event(), "", a, "")
		return a, nil
	}
	key := "slack:" + in.TeamID + ":" + in.TriggerID
	if runID, ok, err := h.slackRecent(ctx, key); err != nil {
		return answer{}, err
	} else if ok {
		a := slackStarted(runID, agent, true)
		h.logStarted(ctx, SourceSlack, key, in.event(), agent, a, runID)
		return a, nil
	}
	caller := run.Caller{UserID: in.UserID, Metadata: map[string]string{"source": SourceSlack, "team_id": in.TeamID, "trigger_id": in.TriggerID, "event": in.event()}}
	res, err := h.submit(ctx, agent, key, in, caller)
	if err != nil {
		return answer{}, err
	}
	a := slackStarted(res.RunID, agent, res.Duplicate)
	h.logStarted(ctx, SourceSlack, key, in.event(), agent, a, res.RunID)
	return a, nil
}

// slackRecent holds a trigger id to its run for the 30 minutes Slack keeps
// it valid even when the Runner's completed TTL is set shorter: the
// Runner would take the expired key over and start a second run.
func (h *Handler) slackRecent(ctx context.Context, key string) (string, bool, error) {
	rec, err := h.cfg.Runner.Idempotency(ctx, key)
	switch {
	case errors.Is(err, run.ErrIdempotencyExpired):
		if rec.Status == run.IdempotencyCompleted && h.clock.Now().Before(rec.CreatedAt.Add(SlackTriggerValidity)) {
			return rec.RunID, true, nil
		}
		return "", false, nil
	case err == nil, errors.Is(err, storage.ErrNotFound):
		return "", false, nil // Submit answers a live record
	}
	return "", false, err
}
