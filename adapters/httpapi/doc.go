// Package httpapi is the Worker's HTTP surface over the SDK (docs/http-api.md).
// Its Go client is package client (adapters/httpapi/client), which a
// caller imports without the engine.
//
// [New] returns a [Server], an http.Handler serving the routes of docs/http-api.md
// (POST /agents/run, GET /runs/{runId}/status, GET /runs/{runId}/steps,
// GET /runs?agent=, POST /inbox/submit, GET /inbox/stats,
// GET /inbox/entries?status=) and the SDK's control routes (cancel, approve,
// reject, external events, agents, jobs, requeue, the NLM callback,
// quarantine) over a run.Runner and, when configured, a jobqueue.Queue, an
// inbox.Box and an nlm.Processor. The Server builds the event feed
// (GET /events/stream, read by [Server.Run]), the live page (/ui/) and the
// GitHub and Slack webhooks from its [Config]; it mounts a metrics handler
// it is given. [Mount] does all of it over a Client's engines (package
// conveyor) in one call: the Server, served on a listener within [Limits],
// and its feed, as loops the Client starts and stops.
//
// What the Server guarantees:
//
//   - Every request's body has a read deadline before anything else looks at
//     it (Limits.BodyTimeout), and an answer given before the body's end
//     closes the connection instead of reading the rest; [Limits.HTTPServer]
//     and [Limits.Listener] bound headers, idle connections and the
//     connections of one remote address.
//   - Every request is then authenticated: a bearer token
//     names its actor (Config.Tokens); with no tokens configured only
//     loopback clients are served, as the actor their X-Conveyor-Actor
//     header names (gateway by default). No or unknown token: 401.
//   - Every route has a table of the actors it admits (403 otherwise), and
//     the SDK's own checks (run machines, the authority matrix) refuse the
//     rest with 403 too.
//   - A body is application/json (415), at most Config.MaxBodyBytes (413),
//     valid UTF-8 without lone surrogate escapes (400 INVALID_INPUT, checked
//     before decoding), one JSON value with no unknown field and nothing
//     after it (400). Ids are checked before any call of the SDK (400).
//   - Every 4xx and 5xx is {"code","message"} with the code and status of
//     lifecycle's one code table; a refused move (409) adds "from", "to" and
//     "allowed".
//   - Nothing is written on a 4xx: a request is checked in full before the
//     SDK is called, and the SDK writes nothing on a refusal.
//   - Every request is counted and timed by method, route pattern and
//     status when Config.Registerer is set; a request whose client went
//     away before the answer is logged at INFO (http_request_canceled) and
//     counted as 499, never as a server error.
package httpapi
