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

// githubDeliver hands a delivery to the runs of rt's agent waiting for
// it: each gets the external event it waits for, its id the delivery's,
// its payload the object a started run's input would be. A
// redelivery finds those runs no longer waiting and hands nothing, so no
// record is needed to keep it to one; a run that stops waiting between
// the list and the hand-over (another process delivered it, a cancel) is
// passed over. It answers 200 with the runs handed the event.
func (h *Handler) githubDeliver(ctx context.Context, in githubInput, rt Route) (answer, error) {
	payload, err := json.Marshal(in)
	if err != nil {
		return answer{}, err
	}
	base := eventType(SourceGitHub, rt.Event)
	ev := run.ExternalEvent{ID: in.Delivery, Source: SourceGitHub, Payload: payload,
		Caller: lifecycle.Caller{UserID: in.Sender, Metadata: map[string]string{"source": SourceGitHub, "delivery": in.Delivery, "event": in.eventType()}}}
	delivered := []string{}
	q := run.RunQuery{Agent: rt.Agent, Status: waitingExternal, Limit: 500}
	for {
		page, err := h.cfg.Runner.ListRuns(ctx, q)
		if err != nil {
			return answer{}, err
		}
		for _, st := range page.Runs {
			if st.External == nil || !in.subjectOf(base, st.External.EventType) {
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
				return answer{}, err
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	a := answer{status: http.StatusOK, body: githubAnswer{Agent: rt.Agent, Delivered: delivered,
		Reason: fmt.Sprintf("github event %q handed to %d waiting run(s)", in.eventType(), len(delivered))}}
	h.log.LogAttrs(ctx, slog.LevelInfo, "webhook_delivered", slog.String("source", SourceGitHub),
		slog.String("delivery", in.Delivery), slog.String("event", base), slog.String("agent", rt.Agent), slog.Any("runIds", delivered))
	return a, nil
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
