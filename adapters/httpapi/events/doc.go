// Package events is the Worker's server-sent events feed, GET /events/stream
// (docs/http-api.md, "Events"), generated from the store rather than from
// the process serving it: Feed.Run tails the audit log (audit/{YYYYMMDD}/),
// which every writer of every process sharing the store appends to, so a
// change made anywhere reaches every stream.
//
//	feed, _ := events.New(events.Config{Store: store})
//	go feed.Run(ctx)
//	mux.Handle("GET /events/stream", feed)
//
// Each poll (Config.PollInterval) lists the day prefix of the audit log
// that holds the cursor (and the neighbouring day around midnight), takes
// the events with an id at or after cursor − Config.Lookback that it has not
// sent yet, in id order (ids sort by time across nodes), translates each into
// zero or more events of the contract, and hands them to every client.
// The lookback lets an event stamped a little in the past (a node whose clock
// lags, a writer slow between stamping and storing, the job queue re-emitting
// an event a dead writer missed) still be sent, once: a set of the ids sent
// within the lookback window keeps it from going out twice.
//
// Translation (audit event → stream event):
//
//	run.status.update (state changed)  → run.status.changed {runId, agentSlug, status, from}
//	run.status.update (more steps)     → run.step.completed {runId, agentSlug, step}
//	inbox.create                       → inbox.new {entryId, count}
//	inbox.status.update                → inbox.status.changed {entryId, status, from}
//	job.create, job.status.update      → job.status.changed {jobId, status, from}
//	nlm.status.update                  → nlm.status.changed {jobId, status, from}
//
// The audit events of runs carry neither the agent nor the step count, so
// the feed reads them: the agent from the run index (once per run), the
// count from the run's status.json (once per run per poll, for each status
// write made while steps execute: from running or cancel_requested). step is the run's steps_completed when the feed
// read it, announced on the first audit event that finds it higher than the
// last announced count; runs that finish between two polls may skip counts.
// One audit event can give both a step and a status event (a step that ends
// in an approval wait); they share its id. inbox.new's count is the number of
// pending entries when the feed read them, counted once per poll that holds
// an inbox.create: the inbox keeps no count, so this reads every live entry.
//
// Cost: every poll lists the whole day prefix, so its cost grows with the
// day's events (a busy day of 100 000 events is 100 listing pages per poll
// on S3); a later change lists from the cursor on and makes it flat.
//
// Clients: each has a buffer of Config.Buffer events; one that falls behind
// is disconnected (Feed.Dropped, a WARN log) and reconnects with
// Last-Event-ID; the broadcaster never waits for anyone. A resume replays
// from the store every event after the given id, from that id's day on and no
// further back than Config.MaxReplay (7 days by default), then continues live
// without a gap or a duplicate. Store failures never stop the feed: the poll
// is retried at the next interval and an outage is logged once, at WARN. An
// audit object that cannot be decoded is skipped with a WARN.
//
// Read parses such a stream, for tests and clients.
package events
