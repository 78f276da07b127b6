// Package client is the Go client of the Worker's HTTP API
// (docs/http-api.md). It imports no engine (no Runner, queue, inbox, NLM
// processor, artifact store or execution core): only the SDK's leaves and
// lifecycle's wire types, so a program that only calls a Worker stays small.
// TestNoEngine keeps it so.
//
// [Client] calls every route and returns the SDK's own records
// (lifecycle.RunStatus, lifecycle.Job, ...); its errors are *[Error], which
// match the SDK's sentinels with errors.Is. [Client.Wait] follows the event
// stream and falls back to polling every 5 s when the stream is unavailable;
// it waits out a server that is down, with backoff, until its context ends
// (*[WaitError]). [Client.WatchInbox] yields the inbox stats at each change.
package client
