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
// Each poll lists the audit log from the cursor − Config.Lookback on, with
// Store.ListAfter (what sorts before costs nothing), through the day of
// now + Lookback (so around midnight two day folders), sends the events
// it has not sent yet, in id order (ids sort by time across nodes),
// translated into zero or more events of the contract, to every client.
// The lookback lets an event stamped a little in the past (a node whose clock
// lags, a writer slow between stamping and storing, the job queue re-emitting
// an event a dead writer missed) still be sent, once: a set of the ids sent
// within the lookback window keeps it from going out twice. A poll runs
// every Config.PollInterval; on a store that watches (storage.Store.Watch), when the
// watch signals a write under audit/ (at most once per PollInterval) and
// every Config.WatchPollInterval otherwise.
//
// Translation (audit event → stream event):
//
//	run.status.update (state changed)  → run.status.changed {runId, agentSlug, status, from}
//	run.status.update (more steps)     → run.step.completed {runId, agentSlug, step}
//	inbox.create                       → inbox.new {entryId, count}
//	inbox.status.update                → inbox.status.changed {entryId, status, from}
//	job.create, job.status.update      → job.status.changed {jobId, status, from}
//	nlm.status.update                  → nlm.status.changed {jobId, status, from}
//	proposal.create                    → proposal.created {proposalId, runId, status, from}
//	proposal.status.update             → proposal.status.changed {proposalId, runId, status, from}
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
// Cost: an idle poll is one listing (two around midnight) that yields the
// events of the last Lookback only, whatever the day holds: one LIST
// request on S3. (filestore, on Linux, seeks in an index of the day's
// folder that it keeps exact with inotify; elsewhere it reads every name
// of the folder to list it. Its watch keeps such listings to a change or
// one per WatchPollInterval.)
//
// Clients: each has a buffer of Config.Buffer events; one that falls behind
// is disconnected (Feed.Dropped, a WARN log) and reconnects with
// Last-Event-ID; the broadcaster never waits for anyone. A write that the
// client's connection does not take within Config.WriteTimeout disconnects
// it too; the connection's send buffer is Config.SendBuffer when the
// server's ConnContext is ConnContext, so a client that stops reading is
// noticed once about 100 KB are unread, not 4 MB. A resume replays
// from the store every event after the given id, no further back than
// Config.MaxReplay (7 days by default), then continues live without a gap
// or a duplicate. It reads the store a page at a time (Config.ReplayPage
// keys, the page's objects 8 at a time), so a client holds one page
// whatever the backlog, and lets its buffers go once written; the
// run-to-agent cache is the feed's, shared by every replay; all resumes together read at most
// Config.MaxReplays pages at once and Config.ReplayRate events a second,
// so many resuming clients cannot take the process's memory, CPU or store
// with them. An id the feed cannot resume from exactly gets a stream.reset
// event first (TypeStreamReset: not an id, ResetInvalid; no longer in the
// store, ResetGone; older than MaxReplay, ResetTooOld), then what the store
// still has after it. Store failures never stop the feed: the poll is
// retried at the next interval and an outage is logged once, at WARN. An
// audit object that cannot be decoded is skipped with a WARN.
//
// Read parses such a stream, for tests and clients.
package events
