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
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/internal/idemrecord"
	"github.com/runconveyor/conveyor/internal/layout"
	"github.com/runconveyor/conveyor/internal/records"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/storage"
)

// GitHub's headers.
const (
	githubSignatureHeader = "X-Hub-Signature-256"
	githubEventHeader     = "X-GitHub-Event"
	githubDeliveryHeader  = "X-GitHub-Delivery"
)

// githubInput is a GitHub run's input: what an agent needs to fetch the
// rest, not the whole delivery (which may be MiBs).
type githubInput struct {
	Event      string `json:"event"`
	Action     string `json:"action,omitempty"`
	Delivery   string `json:"delivery"`
	Repository string `json:"repository,omitempty"`
	Number     int64  `json:"number,omitempty"`
	Sender     string `json:"sender,omitempty"`
}

// eventType is the event with its action, the type routes and the
// secondary dedupe compare: "pull_request.opened" and
// "pull_request.synchronize" are different events of one PR.
func (in githubInput) eventType() string {
	if in.Action == "" {
		return in.Event
	}
	return in.Event + "." + in.Action
}

// githubAnswer is GitHub's 2xx body.
type githubAnswer struct {
	Started bool   `json:"started"`
	RunID   string `json:"run_id,omitempty"`
	Agent   string `json:"agent,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Delivered lists the waiting runs a Deliver route handed the event.
	Delivered []string `json:"delivered,omitempty"`
}

func githubStarted(runID, agent string, duplicate bool) answer {
	return answer{status: http.StatusCreated, body: githubAnswer{Started: true, RunID: runID, Agent: agent}, duplicate: duplicate}
}

// verifyGitHub checks X-Hub-Signature-256 against the raw body in constant
// time; it runs before the body is parsed, so no unauthenticated byte
// reaches a parser.
func verifyGitHub(secret, header string, body []byte) error {
	if header == "" {
		return webhookErr(codes.WebhookSignatureInvalid, "no %s header", githubSignatureHeader)
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	got, err := hex.DecodeString(hexSig)
	if !ok || err != nil || len(got) != sha256.Size {
		return webhookErr(codes.WebhookSignatureInvalid, "%s is not sha256=<64 hex digits>", githubSignatureHeader)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return webhookErr(codes.WebhookSignatureInvalid, "%s does not match the body", githubSignatureHeader)
	}
	return nil
}

// githubPayload is the part of a delivery's body the intake reads.
type githubPayload struct {
	Action      string `json:"action"`
	Number      int64  `json:"number"`
	PullRequest *struct {
		Number int64 `json:"number"`
	} `json:"pull_request"`
	Issue *struct {
		Number int64 `json:"number"`
	} `json:"issue"`
	Repository *struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
	Sender *struct {
		Login string `json:"login"`
	} `json:"sender"`
}

// parseGitHub reads an authenticated delivery: its headers and the fields
// of its body that become the run's input. A webhook configured as
// application/x-www-form-urlencoded carries the JSON in its payload field.
func parseGitHub(event, delivery, mediaType string, body []byte) (githubInput, error) {
	bad := func(format string, args ...any) (githubInput, error) {
		return githubInput{}, webhookErr(codes.InvalidRequest, format, args...)
	}
	if !validName(event) {
		return bad("%s %q is not an event name", githubEventHeader, truncate(event))
	}
	if !validKeyPart(delivery) {
		return bad("%s %q is not a delivery id (1 to 128 bytes of [A-Za-z0-9._-])", githubDeliveryHeader, truncate(delivery))
	}
	if mediaType == "application/x-www-form-urlencoded" {
		form, err := url.ParseQuery(string(body))
		if err != nil || len(form["payload"]) != 1 {
			return bad("a form-encoded delivery has one payload field")
		}
		body = []byte(form.Get("payload"))
	}
	// Before decoding: encoding/json turns invalid UTF-8 into U+FFFD, so
	// the fields checked below would look clean.
	if err := codes.CheckJSON("body", body, len(body)); err != nil {
		return githubInput{}, err
	}
	var p githubPayload
	if err := json.Unmarshal(body, &p); err != nil || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return bad("the delivery is not a JSON object")
	}
	in := githubInput{Event: event, Action: p.Action, Delivery: delivery, Number: p.Number}
	if in.Action != "" && !validName(in.Action) {
		return bad("action %q is not an action name", truncate(in.Action))
	}
	switch {
	case in.Number > 0:
	case p.PullRequest != nil && p.PullRequest.Number > 0:
		in.Number = p.PullRequest.Number
	case p.Issue != nil && p.Issue.Number > 0:
		in.Number = p.Issue.Number
	default:
		in.Number = 0
	}
	if p.Repository != nil {
		in.Repository = p.Repository.FullName
	}
	if p.Sender != nil {
		in.Sender = p.Sender.Login
	}
	// Checked here, before anything is written: they become the run's
	// caller and the window's key.
	if err := codes.CheckText("repository.full_name", in.Repository, codes.MaxNameBytes, codes.OneLine); err != nil {
		return bad("%v", err)
	}
	if err := codes.CheckText("sender.login", in.Sender, codes.MaxNameBytes, codes.OneLine); err != nil {
		return bad("%v", err)
	}
	return in, nil
}

// about names in a run's request the delivery, and the repository and
// pull request the event is about: a pull_request* event's run carries
// the pull request's number and page.
func (in githubInput) about(req *lifecycle.SubmitRequest) {
	req.WebhookEventID = in.Delivery
	if _, err := layout.RepoRunsRepoPrefix(in.Repository); err != nil {
		return // no repository, or a name no key can hold: the run is not listed by one
	}
	req.RepoID = in.Repository
	if in.Number > 0 && strings.HasPrefix(in.Event, "pull_request") {
		req.PRID = strconv.FormatInt(in.Number, 10)
		req.PRURL = "https://github.com/" + in.Repository + "/pull/" + req.PRID
	}
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// github answers POST /webhooks/github.
func (h *Handler) github(w http.ResponseWriter, r *http.Request) (answer, error) {
	mt, err := checkMediaType(r, "application/json", "application/x-www-form-urlencoded")
	if err != nil {
		return answer{}, err
	}
	body, err := h.readBody(w, r)
	if err != nil {
		return answer{}, err
	}
	if err := verifyGitHub(h.cfg.GitHubSecret, r.Header.Get(githubSignatureHeader), body); err != nil {
		return answer{}, err
	}
	in, err := parseGitHub(r.Header.Get(githubEventHeader), r.Header.Get(githubDeliveryHeader), mt, body)
	if err != nil {
		return answer{}, err
	}
	ctx := r.Context()
	if rt, ok := h.routeOf(SourceGitHub, in.eventType(), in.Event); ok {
		ctx = lifecycle.WithTenant(ctx, rt.Tenant) // its runs are the route's tenant's
		if rt.Deliver {
			return h.githubDeliver(ctx, in, rt)
		}
	}
	agent := h.route(SourceGitHub, in.eventType(), in.Event)
	if agent == "" {
		a := answer{status: http.StatusAccepted, body: githubAnswer{Reason: fmt.Sprintf("no route for github event %q", in.eventType())}}
		h.logStarted(ctx, SourceGitHub, "", in.eventType(), "", a, "")
		return a, nil
	}
	key := "github:" + in.Delivery
	caller := lifecycle.Caller{UserID: in.Sender, Metadata: map[string]string{"source": SourceGitHub, "delivery": in.Delivery, "event": in.eventType()}}

	a, runID, err := h.githubDedupe(ctx, in, agent, key)
	if err != nil {
		return answer{}, err
	}
	if a == nil {
		res, err := h.submit(ctx, agent, key, in, caller, in.about)
		if err != nil {
			return answer{}, err
		}
		started := githubStarted(res.RunID, agent, res.Duplicate)
		a, runID = &started, res.RunID
	}
	h.logStarted(ctx, SourceGitHub, key, in.eventType(), agent, *a, runID)
	return *a, nil
}

// githubDedupe answers a delivery that is a duplicate without a submit, or
// returns nil when the delivery is to be submitted under its own key:
//
//  1. a delivery the Runner has a live record of (a redelivery of one that
//     started a run, or is starting it) goes to Submit, which answers it:
//     the window must not, as a later window may belong to another delivery;
//  2. a delivery a window absorbed earlier answers the run it was absorbed
//     into;
//  3. a delivery with a PR or issue number claims, or falls in, the window
//     of its subject (docs/spec.md#idempotency).
func (h *Handler) githubDedupe(ctx context.Context, in githubInput, agent, key string) (*answer, string, error) {
	_, err := idemrecord.Read(ctx, h.cfg.Store, h.clock.Now(), key)
	switch {
	case err == nil:
		return nil, "", nil
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, lifecycle.ErrIdempotencyExpired):
	default:
		return nil, "", err
	}
	akey, err := layout.GitHubDeliveryKey(in.Delivery)
	if err != nil {
		return nil, "", err
	}
	ab, _, err := records.Read[absorbed](ctx, h.cfg.Store, akey)
	var ce *lifecycle.QuarantinedError
	switch {
	case err == nil && h.clock.Now().Before(ab.ExpiresAt):
		a := githubStarted(ab.RunID, ab.Agent, true)
		return &a, ab.RunID, nil
	case err == nil, errors.Is(err, storage.ErrNotFound):
	case errors.As(err, &ce):
		// Undecodable: no answer to give from it; replace overwrites it if
		// the delivery is absorbed again.
	default:
		return nil, "", err
	}
	if in.Number <= 0 || in.Repository == "" {
		return nil, "", nil // no PR or issue: the delivery id is the only key
	}
	first, err := h.claimWindow(ctx, in, agent)
	if err != nil || first == nil {
		return nil, "", err
	}
	if first.runID == "" {
		return &answer{status: http.StatusAccepted, duplicate: true, body: githubAnswer{
			Reason: fmt.Sprintf("duplicate of delivery %s of the same event, whose run is not created yet", first.delivery),
		}}, "", nil
	}
	// Recorded so this delivery's own redelivery, after the window, still
	// answers the first's run instead of starting a second one. Create-only:
	// a concurrent twin recorded the same run.
	now := h.clock.Now()
	doc := absorbed{Delivery: in.Delivery, DuplicateOf: first.delivery, RunID: first.runID, Agent: first.agent, CreatedAt: now, ExpiresAt: now.Add(absorbedTTL)}
	if _, err := records.Create(ctx, h.cfg.Store, akey, &doc); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return nil, "", err
	} else if err != nil {
		// An expired record of an earlier absorption: replace it.
		if err := h.replace(ctx, akey, &doc); err != nil {
			return nil, "", err
		}
	}
	a := githubStarted(first.runID, first.agent, true)
	return &a, first.runID, nil
}

// window is the secondary dedupe record of one subject (repository, number,
// event type): the first delivery within DedupeWindow and its agent.
type window struct {
	lifecycle.Meta

	Repository string    `json:"repository"`
	Number     int64     `json:"number"`
	EventType  string    `json:"event_type"`
	Delivery   string    `json:"delivery"`
	Agent      string    `json:"agent"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// absorbed records a delivery a window took as a duplicate of its first.
type absorbed struct {
	lifecycle.Meta

	Delivery    string    `json:"delivery"`
	DuplicateOf string    `json:"duplicate_of"`
	RunID       string    `json:"run_id"`
	Agent       string    `json:"agent"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// firstDelivery is the delivery a window belongs to; runID is "" while its
// run is not created.
type firstDelivery struct{ delivery, runID, agent string }

// claimWindow makes this delivery the first of its subject's window, and
// returns nil, or returns the first delivery of a live window held by
// another. The claim is a create-only write, so of two processes racing
// for a subject exactly one wins; a window whose time is up, or whose first
// delivery's submit failed, is taken over by a write conditional on the
// version judged, so again one process wins.
func (h *Handler) claimWindow(ctx context.Context, in githubInput, agent string) (*firstDelivery, error) {
	key := layout.GitHubWindowKey(in.Repository, in.Number, in.eventType())
	for range 5 {
		now := h.clock.Now()
		mine := window{Repository: in.Repository, Number: in.Number, EventType: in.eventType(), Delivery: in.Delivery,
			Agent: agent, CreatedAt: now, ExpiresAt: now.Add(DedupeWindow)}
		_, err := records.Create(ctx, h.cfg.Store, key, &mine)
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return nil, err // claimed, or failed
		}
		cur, ver, err := records.Read[window](ctx, h.cfg.Store, key)
		var ce *lifecycle.QuarantinedError
		switch {
		case errors.As(err, &ce):
			// A poison window must not block its subject forever: it is
			// only a dedupe hint, so it is overwritten.
			cur, ver = window{}, storage.Version(ce.Version)
		case errors.Is(err, storage.ErrNotFound):
			continue
		case err != nil:
			return nil, err
		case cur.Delivery == in.Delivery:
			return nil, nil // a retry of the window's own first delivery
		case now.Before(cur.ExpiresAt):
			rec, err := idemrecord.Read(ctx, h.cfg.Store, h.clock.Now(), "github:"+cur.Delivery)
			switch {
			case err == nil && rec.Status != idemrecord.Failed:
				return &firstDelivery{delivery: cur.Delivery, runID: rec.RunID, agent: cur.Agent}, nil
			case errors.Is(err, storage.ErrNotFound):
				return &firstDelivery{delivery: cur.Delivery, agent: cur.Agent}, nil
			case err != nil && !errors.Is(err, lifecycle.ErrIdempotencyExpired):
				return nil, err
			}
			// The first delivery failed to start its run: take over.
		}
		mine.Version = cur.Version + 1
		if err := put(ctx, h.cfg.Store, key, &mine, storage.IfMatch(ver)); err == nil {
			return nil, nil
		} else if !errors.Is(err, storage.ErrPreconditionFailed) {
			return nil, err
		}
		// Another process took the window over first: judge again.
	}
	return nil, fmt.Errorf("webhook: the dedupe window %s kept changing under this delivery", key)
}

// replace overwrites an absorbed record that is known to exist: it is
// replaced only when expired, conditional on the version judged.
func (h *Handler) replace(ctx context.Context, key string, doc *absorbed) error {
	cur, ver, err := records.Read[absorbed](ctx, h.cfg.Store, key)
	var ce *lifecycle.QuarantinedError
	switch {
	case errors.As(err, &ce):
		ver = storage.Version(ce.Version)
	case err != nil:
		return err
	case h.clock.Now().Before(cur.ExpiresAt):
		return nil // live: a concurrent twin recorded it
	}
	doc.Version = cur.Version + 1
	err = put(ctx, h.cfg.Store, key, doc, storage.IfMatch(ver))
	if errors.Is(err, storage.ErrPreconditionFailed) {
		return nil // replaced by a concurrent twin
	}
	return err
}

// put writes a document under a condition.
func put(ctx context.Context, s *storage.Store, key string, doc any, cond storage.Condition) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = s.Put(ctx, key, b, cond)
	return err
}
