// Package webhook receives GitHub and Slack webhooks and starts the agent
// run a routing table maps each one to, with trigger "event", exactly once
// per delivery across every process sharing the Runner's store (issue 13,
// docs/spec.md#idempotency).
//
// A Handler serves POST /webhooks/github and POST /webhooks/slack; the
// Worker's HTTP server mounts it at /webhooks/ and it reads the full path.
// A source without a secret in the Config is not served (404).
//
//	h, _ := webhook.New(webhook.Config{
//		Runner: runner, Store: store,
//		GitHubSecret: os.Getenv("GITHUB_WEBHOOK_SECRET"),
//		Routes: []webhook.Route{{Source: "github", Event: "pull_request.opened", Agent: "reviewer"}},
//	})
//	mux.Handle("/webhooks/", h)
//
// # Authentication
//
// GitHub: X-Hub-Signature-256 is "sha256=" and the hex HMAC-SHA256 of the
// raw body under GitHubSecret. Slack: X-Slack-Signature is "v0=" and the
// hex HMAC-SHA256 of "v0:{X-Slack-Request-Timestamp}:{raw body}" under
// SlackSigningSecret, and the timestamp is at most ReplayWindow (5 minutes)
// from the Config's clock, either way. Signatures are compared in constant
// time, before the body is parsed.
//
// # Routing and the run's input
//
// A Route maps a GitHub event ("pull_request", or with its action,
// "pull_request.opened", which wins over the bare event) or a Slack slash
// command ("/research"), interactive payload type ("block_actions") or
// Events API event type ("app_mention") to an agent. The run's input is a
// small JSON object, not the whole delivery:
//
//	github: {"event", "action", "delivery", "repository", "number", "sender"}
//	slack:  {"type", "team_id", "user_id", "channel_id", "command", "text", "trigger_id", "response_url"}
//	slack events: {"type": "event_callback", "event_type", "event_id", "event_ts", "team_id", "user_id", "channel_id", "text"}
//
// where github's number is the PR's or issue's (0 and omitted when the event
// has none) and slack's type is "slash_command" or the payload's type.
//
// # Delivering to waiting runs
//
// A Route with Deliver set starts no run: it hands the delivery to the
// runs of its agent that wait for it, each parked by a step returning
// run.Await{ExternalEvent: source + ":" + the route's Event} (e.g.
// "github:check_suite.completed", "slack:app_mention"), or narrowed: to a
// repository ("github:check_suite.completed:octo/repo") or its pull
// request or issue ("...:octo/repo#12"), to a Slack channel
// ("slack:app_mention:C7"). Each such run resumes with the event
// (run.ExternalEvent: that type, the delivery's or event's id, the source,
// and as payload the object a started run's input would be), which its
// next steps get as StepInput.Event. The answer is 200 {"started": false,
// "agent", "delivered": [run ids], "reason"} (Slack's with its "text"). A
// redelivery finds those runs no longer waiting and hands nothing, so it
// needs no record of its own.
//
// # Slack's Events API
//
// POST /webhooks/slack also takes the Events API's application/json
// requests, signed as every Slack request: a url_verification is answered
// 200 {"challenge"} with its challenge (so the path can be registered as the
// app's request URL), an event_callback is routed by its event's type, and
// an app_rate_limited notice is answered 200 and logged. Slack retries an
// event it got no 200 for within 3 seconds, with X-Slack-Retry-Num; the
// event_id is the delivery's key, so a retry answers the first run.
//
// # Answers
//
// Every error is {"code", "message"} with the status of lifecycle's one code
// table, and nothing is written on any 4xx:
//
//	404 NOT_FOUND                  another path, or a source with no secret
//	405 METHOD_NOT_ALLOWED         not POST (Allow: POST)
//	415 UNSUPPORTED_MEDIA_TYPE     not application/json or
//	                               application/x-www-form-urlencoded (github:
//	                               payload=; slack: a command, or payload=)
//	413 INPUT_TOO_LARGE            a body over Config.MaxBodyBytes
//	401 WEBHOOK_SIGNATURE_INVALID  a missing, malformed or wrong signature
//	                               (slack: or timestamp)
//	401 WEBHOOK_STALE              slack: signed, but outside the replay window
//	400 INVALID_REQUEST            a missing or malformed event, delivery id,
//	                               team, trigger or event id, or body
//	400 INVALID_INPUT              invalid UTF-8 or a lone surrogate escape in
//	                               a JSON body, or in a command's text
//	409 IDEMPOTENCY_CONFLICT       a delivery id reused with another body
//	502 UPSTREAM_UNAVAILABLE       the store stayed unavailable
//
// The other answers are 2xx with {"started", "run_id", "agent", "reason"}
// (GitHub) and the same fields plus "response_type" and "text" (Slack, which
// shows the text to the user and treats any status but 200 as a failure):
//
//	github 201 {"started": true, "run_id", "agent"}     a run was started
//	github 202 {"started": false, "reason"}             no route: nothing started, nothing written
//	slack  200 {... "started": true, "run_id", "agent"} a run was started
//	slack  200 {... "started": false, "reason"}         no route
//
// A duplicate gets the first delivery's answer again, the same status and
// body (docs/spec.md#idempotency), and the header X-Conveyor-Duplicate: true.
//
// # Deduplication
//
// The idempotency key is github:{X-GitHub-Delivery},
// slack:{team_id}:{trigger_id} or, for an Events API event,
// slack:{team_id}:{event_id}, handed to Runner.Submit, so
// the Runner's check-and-set record and its TTLs (docs/spec.md#idempotency: completed
// 24 h, failed 1 h, processing lock 5 min) decide duplicates.
//
// GitHub adds the secondary dedupe of docs/spec.md#idempotency: a delivery of the same
// repository, PR or issue number and event type (event.action) as another
// delivery less than DedupeWindow (5 s) earlier is a duplicate of that
// first one. A window is a record of its own, claimed by a create-only
// write, so two processes racing for it start one run; an expired window is
// taken over by a conditional write. A delivery absorbed by a window is
// recorded (for 24 h, the completed TTL) so its own redelivery later still
// answers the first run. If the first delivery's run is not created yet
// (it is between its two writes, or its process died there) the duplicate is
// answered 202 with "started": false; the first delivery carries the event.
//
// Slack's trigger ids are valid for 30 minutes: a key whose
// completed record is younger than SlackTriggerValidity answers its run even
// when the Runner's completed TTL is set shorter, and the 5-minute replay
// window refuses any older request before its key is looked at.
package webhook
