package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// Slack's headers.
const (
	slackSignatureHeader = "X-Slack-Signature"
	slackTimestampHeader = "X-Slack-Request-Timestamp"
	// slackRetryHeader is set on the Events API's retries of a delivery
	// it got no 200 for; the retry carries the same event_id, the key.
	slackRetryHeader = "X-Slack-Retry-Num"
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
	TriggerID   string `json:"trigger_id,omitempty"`
	ResponseURL string `json:"response_url,omitempty"`
	// EventID and EventType are an Events API delivery's (Type is then
	// "event_callback"); EventTS is its event's ts, when it has one.
	EventID   string `json:"event_id,omitempty"`
	EventType string `json:"event_type,omitempty"`
	EventTS   string `json:"event_ts,omitempty"`
}

// event is what a route names: the command, the event's type, or the
// payload's type.
func (in slackInput) event() string {
	switch in.Type {
	case slackCommandType:
		return in.Command
	case slackEventCallback:
		return in.EventType
	}
	return in.Type
}

// key is the delivery's idempotency key: slack:{team}:{event_id} for an
// event (a retry carries the same id), slack:{team}:{trigger_id} otherwise.
func (in slackInput) key() string {
	if in.Type == slackEventCallback {
		return "slack:" + in.TeamID + ":" + in.EventID
	}
	return "slack:" + in.TeamID + ":" + in.TriggerID
}

// The outer types of Slack requests the intake tells apart.
const (
	slackCommandType      = "slash_command"
	slackURLVerification  = "url_verification"
	slackEventCallback    = "event_callback"
	slackAppRateLimited   = "app_rate_limited"
	maxSlackChallengeSize = 256
)

// slackAnswer is Slack's 200 body: Slack shows text to the user who sent
// the command (ephemeral), and ignores the other fields.
type slackAnswer struct {
	ResponseType string `json:"response_type"`
	Text         string `json:"text"`
	Started      bool   `json:"started"`
	RunID        string `json:"run_id,omitempty"`
	Agent        string `json:"agent,omitempty"`
	Reason       string `json:"reason,omitempty"`
	// Delivered lists the waiting runs a Deliver route handed the event.
	Delivered []string `json:"delivered,omitempty"`
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
		return webhookErr(codes.WebhookSignatureInvalid, "%s is missing or not Unix seconds", slackTimestampHeader)
	}
	if signature == "" {
		return webhookErr(codes.WebhookSignatureInvalid, "no %s header", slackSignatureHeader)
	}
	hexSig, ok := strings.CutPrefix(signature, "v0=")
	got, err := hex.DecodeString(hexSig)
	if !ok || err != nil || len(got) != sha256.Size {
		return webhookErr(codes.WebhookSignatureInvalid, "%s is not v0=<64 hex digits>", slackSignatureHeader)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + timestamp + ":"))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return webhookErr(codes.WebhookSignatureInvalid, "%s does not match the body", slackSignatureHeader)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > ReplayWindow || d < -ReplayWindow {
		return webhookErr(codes.WebhookStale, "%s is %s from the server's clock, over %s", slackTimestampHeader, d.Round(time.Second), ReplayWindow)
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
		return slackInput{}, webhookErr(codes.InvalidRequest, format, args...)
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
	if err := codes.CheckText("response_url", in.ResponseURL, codes.MaxURLBytes, codes.OneLine); err != nil {
		return bad("%v", err)
	}
	// The text becomes the run's input: undecodable bytes in it (a form
	// value is percent-decoded to any bytes) are refused, not turned into
	// U+FFFD by the input's encoding.
	if err := codes.CheckText("text", in.Text, codes.MaxDocumentBytes, codes.MultiLine); err != nil {
		return slackInput{}, err
	}
	return in, nil
}

// slackEnvelope is the part of an Events API request the intake reads.
type slackEnvelope struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	TeamID    string `json:"team_id"`
	EventID   string `json:"event_id"`
	// Event's fields vary by type (a channel is a string in a message, an
	// object in channel_created): each is taken only when it is a string.
	Event map[string]json.RawMessage `json:"event"`
}

// eventString is the event's field as a string, "" when it is absent or
// not a string.
func (e slackEnvelope) eventString(field string) string {
	var s string
	if json.Unmarshal(e.Event[field], &s) != nil {
		return ""
	}
	return s
}

// parseSlackEvent reads an authenticated Events API body. A
// url_verification's challenge comes back in challenge; an event_callback
// is its input; an app_rate_limited notice is neither.
func parseSlackEvent(body []byte) (in slackInput, challenge string, err error) {
	bad := func(format string, args ...any) (slackInput, string, error) {
		return slackInput{}, "", webhookErr(codes.InvalidRequest, format, args...)
	}
	// Before decoding: encoding/json turns invalid UTF-8 into U+FFFD.
	if err := codes.CheckJSON("body", body, len(body)); err != nil {
		return slackInput{}, "", err
	}
	var env slackEnvelope
	if err := json.Unmarshal(body, &env); err != nil || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return bad("the body is not a JSON object")
	}
	switch env.Type {
	case slackURLVerification:
		if env.Challenge == "" || len(env.Challenge) > maxSlackChallengeSize || codes.CheckText("challenge", env.Challenge, maxSlackChallengeSize, codes.OneLine) != nil {
			return bad("challenge is missing or not a short line of text")
		}
		return slackInput{Type: env.Type}, env.Challenge, nil
	case slackAppRateLimited:
		return slackInput{Type: env.Type, TeamID: env.TeamID}, "", nil
	case slackEventCallback:
	default:
		return bad("type %q is not url_verification, event_callback or app_rate_limited", truncate(env.Type))
	}
	in = slackInput{Type: env.Type, TeamID: env.TeamID, EventID: env.EventID, EventType: env.eventString("type"),
		UserID: env.eventString("user"), ChannelID: env.eventString("channel"), Text: env.eventString("text"), EventTS: env.eventString("event_ts")}
	if !validName(in.EventType) {
		return bad("event.type %q is not a type name", truncate(in.EventType))
	}
	if !validKeyPart(in.TeamID) {
		return bad("team_id %q is not an id (1 to 128 bytes of [A-Za-z0-9._-])", truncate(in.TeamID))
	}
	if !validKeyPart(in.EventID) {
		return bad("event_id %q is not an id (1 to 128 bytes of [A-Za-z0-9._-])", truncate(in.EventID))
	}
	// Ids or nothing: the user and channel of a bot's message, say, are
	// not a plain user's.
	if !validKeyPart(in.UserID) {
		in.UserID = ""
	}
	if !validKeyPart(in.ChannelID) {
		in.ChannelID = ""
	}
	if !validKeyPart(in.EventTS) {
		in.EventTS = ""
	}
	if err := codes.CheckText("event.text", in.Text, codes.MaxDocumentBytes, codes.MultiLine); err != nil {
		return slackInput{}, "", err
	}
	return in, "", nil
}

// slackChallenge is the answer to a url_verification.
type slackChallenge struct {
	Challenge string `json:"challenge"`
}

// slack answers POST /webhooks/slack: a slash command or an interactive
// payload (form-encoded), or an Events API request (JSON).
func (h *Handler) slack(w http.ResponseWriter, r *http.Request) (answer, error) {
	mt, err := checkMediaType(r, "application/x-www-form-urlencoded", "application/json")
	if err != nil {
		return answer{}, err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return answer{}, err
	}
	if err := verifySlack(h.cfg.SlackSigningSecret, r.Header.Get(slackTimestampHeader), r.Header.Get(slackSignatureHeader), body, h.clock.Now()); err != nil {
		return answer{}, err
	}
	var in slackInput
	if mt == "application/json" {
		var challenge string
		in, challenge, err = parseSlackEvent(body)
		switch {
		case err != nil:
			return answer{}, err
		case in.Type == slackURLVerification:
			return answer{status: http.StatusOK, body: slackChallenge{Challenge: challenge}}, nil
		case in.Type == slackAppRateLimited:
			// Slack says it dropped events for an hour; nothing to start.
			h.log.LogAttrs(r.Context(), slog.LevelWarn, "webhook_slack_rate_limited", slog.String("team_id", in.TeamID))
			return answer{status: http.StatusOK, body: slackAnswer{Reason: "app_rate_limited noted"}}, nil
		}
		if n := r.Header.Get(slackRetryHeader); n != "" {
			// A retry is answered by its event id's record, below.
			h.log.LogAttrs(r.Context(), slog.LevelDebug, "webhook_slack_retry", slog.String("event_id", in.EventID),
				slog.String("retry", truncate(n)), slog.String("reason", truncate(r.Header.Get("X-Slack-Retry-Reason"))))
		}
	} else if in, err = parseSlack(body); err != nil {
		return answer{}, err
	}
	ctx := r.Context()
	if rt, ok := h.routeOf(SourceSlack, in.event()); ok {
		ctx = lifecycle.WithTenant(ctx, rt.Tenant) // its runs are the route's tenant's
		if rt.Deliver {
			return h.slackDeliver(ctx, in, rt)
		}
	}
	agent := h.route(SourceSlack, in.event())
	if agent == "" {
		reason := fmt.Sprintf("no route for slack event %q", in.event())
		a := answer{status: http.StatusOK, body: slackAnswer{ResponseType: "ephemeral",
			Text: fmt.Sprintf("Nothing handles %s here.", in.event()), Reason: reason}}
		h.logStarted(ctx, SourceSlack, "", in.event(), "", a, "")
		return a, nil
	}
	key := in.key()
	if runID, ok, err := h.slackRecent(ctx, key); err != nil {
		return answer{}, err
	} else if ok {
		a := slackStarted(runID, agent, true)
		h.logStarted(ctx, SourceSlack, key, in.event(), agent, a, runID)
		return a, nil
	}
	meta := map[string]string{"source": SourceSlack, "team_id": in.TeamID, "event": in.event()}
	if in.Type == slackEventCallback {
		meta["event_id"] = in.EventID
	} else {
		meta["trigger_id"] = in.TriggerID
	}
	caller := lifecycle.Caller{UserID: in.UserID, Metadata: meta}
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
	rec, err := idemrecord.Read(ctx, h.cfg.Store, h.clock.Now(), key)
	switch {
	case errors.Is(err, lifecycle.ErrIdempotencyExpired):
		if rec.Status == idemrecord.Completed && h.clock.Now().Before(rec.CreatedAt.Add(SlackTriggerValidity)) {
			return rec.RunID, true, nil
		}
		return "", false, nil
	case err == nil, errors.Is(err, storage.ErrNotFound):
		return "", false, nil // Submit answers a live record
	}
	return "", false, err
}
