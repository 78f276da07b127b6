package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/runconveyor/conveyor/internal/codes"
	"github.com/runconveyor/conveyor/lifecycle"
	"github.com/runconveyor/conveyor/lifecycle/run"
)

// waitingExternal is the approval machine's state of a run waiting for an
// external event.
const waitingExternal = "waiting_external"

// eventType is the external event type a run waits for (run.Await's
// ExternalEvent) to be handed the deliveries of a Deliver route of source
// and event: "github:check_suite.completed".
func eventType(source, event string) string { return source + ":" + event }

// githubDeliver hands a GitHub delivery to the runs of rt's agent waiting
// for it (deliverTo) and answers 200 with them.
func (h *Handler) githubDeliver(ctx context.Context, in githubInput, rt Route) (answer, error) {
	base := eventType(SourceGitHub, rt.Event)
	caller := lifecycle.Caller{UserID: in.Sender, Metadata: map[string]string{"source": SourceGitHub, "delivery": in.Delivery, "event": in.eventType()}}
	delivered, err := h.deliverTo(ctx, rt, in, run.ExternalEvent{ID: in.Delivery, Source: SourceGitHub, Caller: caller},
		func(want string) bool { return in.subjectOf(base, want) })
	if err != nil {
		return answer{}, err
	}
	return answer{status: http.StatusOK, body: githubAnswer{Agent: rt.Agent, Delivered: delivered,
		Reason: fmt.Sprintf("github event %q handed to %d waiting run(s)", in.eventType(), len(delivered))}}, nil
}

// slackDeliver hands a Slack request to the runs of rt's agent waiting
// for it: "slack:" and its event ("slack:app_mention",
// "slack:block_actions"), or narrowed to its channel
// ("slack:app_mention:C7"). Slack gets 200 and a line to show.
func (h *Handler) slackDeliver(ctx context.Context, in slackInput, rt Route) (answer, error) {
	base := eventType(SourceSlack, rt.Event)
	meta := map[string]string{"source": SourceSlack, "team_id": in.TeamID, "event": in.event()}
	id := in.EventID
	if id == "" {
		id = in.TriggerID
	}
	delivered, err := h.deliverTo(ctx, rt, in, run.ExternalEvent{ID: id, Source: SourceSlack, Caller: lifecycle.Caller{UserID: in.UserID, Metadata: meta}},
		func(want string) bool { return want == base || in.ChannelID != "" && want == base+":"+in.ChannelID })
	if err != nil {
		return answer{}, err
	}
	return answer{status: http.StatusOK, body: slackAnswer{ResponseType: "ephemeral", Agent: rt.Agent, Delivered: delivered,
		Text: fmt.Sprintf("Handed to %d waiting run(s).", len(delivered)), Reason: fmt.Sprintf("slack event %q handed to %d waiting run(s)", in.event(), len(delivered))}}, nil
}

// deliverTo hands the event ev, its payload input (the object a started
// run's input would be), to each run of rt's agent waiting for an event
// type that matches, and returns them. A redelivery finds those runs no
// longer waiting and hands nothing, so no record is needed to keep it to
// one; a run that stops waiting between the list and the hand-over
// (another process delivered it, a cancel) is passed over.
func (h *Handler) deliverTo(ctx context.Context, rt Route, input any, ev run.ExternalEvent, matches func(string) bool) ([]string, error) {
	payload, err := json.Marshal(input)
	if err != nil {
		return nil, err
	}
	ev.Payload = payload
	delivered := []string{}
	q := run.RunQuery{Agent: rt.Agent, Status: waitingExternal, Limit: 500}
	for {
		page, err := h.cfg.Runner.ListRuns(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, st := range page.Runs {
			if st.External == nil || !matches(st.External.EventType) {
				continue
			}
			ev.Type = st.External.EventType
			_, err := h.cfg.Runner.Deliver(ctx, st.RunID, lifecycle.ActorGateway, ev)
			switch {
			case err == nil:
				delivered = append(delivered, st.RunID)
			case errors.Is(err, lifecycle.ErrInvalidTransition), errors.Is(err, lifecycle.ErrRunNotFound),
				lifecycle.ErrorCode(err) == codes.InvalidRequest:
				// No longer waiting for it: delivered by another process,
				// cancelled, or moved on to another wait.
			default:
				return nil, err
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	h.log.LogAttrs(ctx, slog.LevelInfo, "webhook_delivered", slog.String("source", ev.Source),
		slog.String("id", ev.ID), slog.String("route", rt.Event), slog.String("agent", rt.Agent), slog.Any("runIds", delivered))
	return delivered, nil
}

// subjectOf tells whether a run waiting for the event type want is waiting
// for this delivery of the route's event base ("github:check_suite.completed"):
// want is base itself (any repository), or narrowed to the delivery's
// repository ("github:check_suite.completed:octo/repo") or its pull
// request or issue ("github:pull_request.closed:octo/repo#12").
func (in githubInput) subjectOf(base, want string) bool {
	if want == base {
		return true
	}
	rest, ok := strings.CutPrefix(want, base+":")
	if !ok || in.Repository == "" {
		return false
	}
	return rest == in.Repository || in.Number > 0 && rest == in.Repository+"#"+strconv.FormatInt(in.Number, 10)
}
