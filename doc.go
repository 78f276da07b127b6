// Package conveyor is a Go SDK for running the lifecycles of agent runs, queued
// jobs, NLM backend jobs, inbox entries and artifacts.
//
// Each lifecycle is a declarative transition table (package lifecycle); every
// state change goes through one small, pluggable Store with compare-and-swap
// writes (package storage and its adapters); and the SDK supplies the
// orchestration that turns a plain Go program into a Worker.
//
// This package is the composition root: a Client, built by New from one
// Config, wires the engines over one Store (the Runner, the job Queue and
// its worker, the NLM processor, the inbox Box, the Scheduler, the
// retention janitor), giving each the shared Clock, Logger, Owner, Node,
// TracerProvider and metrics; Start checks the store and starts them in
// order, Stop stops them in reverse, and the accessors (Runs, Jobs, Inbox,
// Artifacts, NLM, Schedules) return the engines for the calls a program
// makes. The HTTP API (package adapters/httpapi) mounts on those; Add runs
// its server, or any loop of the program's, between Start and Stop:
//
//	c, _ := conveyor.New(conveyor.Config{Store: store, Agents: agents, JobTypes: types})
//	_ = c.Start(ctx)
//	defer c.Stop(ctx)
//	res, _ := c.Runs().Submit(ctx, lifecycle.SubmitRequest{AgentSlug: "archivist-violin"})
//
// Packages, from the ground up (docs/design.md#layers-and-packages holds the layers, and
// a test holds the imports to them):
//
//	lifecycle      the types: records, states, wire bodies, the errors to match
//	lifecycle/clock  the clock (real and fake)
//	storage        the Store contract: conditions, versions, keys, errors, Watch
//	adapters/memstore, filestore, s3store   Store adapters
//	lifecycle/run  the Runner: run records, idempotency, recovery
//	jobqueue       the Queue and the Worker
//	lifecycle/nlm  the NLM processor; a run step that waits for it
//	inbox          the inbox Box
//	artifact       the artifact store
//	adapters/…     httpapi (the HTTP API, with its event stream, live page and
//	               webhooks, and its client), prometheus (metrics and alert
//	               rules), otlp (span export)
//	conveyor       the Client: the composition root (this package), with
//	               the schedules and retention it runs
//	examples/…     worker (the Worker), conveyor (its CLI), machines, chaos
package conveyor
