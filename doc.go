// Package conveyor is a Go SDK for running the lifecycles of agent runs, queued
// jobs, NLM backend jobs, inbox entries and artifacts.
//
// Each lifecycle is a declarative transition table (package lifecycle); every
// state change goes through one small, pluggable Store with compare-and-swap
// writes (package storage and its adapters); and the SDK supplies the
// orchestration that turns a plain Go program into a Worker.
//
// Packages, in the one direction imports point:
//
//	storage        the Store contract, its errors, key layout, typed documents, audit log
//	lifecycle      the declarative Machine, the run and step machines, actors, codes, input checks
//	lifecycle/run  the Runner: run records, idempotency, recovery
//	lifecycle/clock  the clock the SDK waits on, and a fake one for tests
//	jobqueue       the job machine, the Queue and the Worker
//	lifecycle/nlm   the NLM-job machine and processor; a run step that waits for it
//	inbox          the inbox entry machine
//	artifact       the artifact model
//	adapters/…     memstore, filestore, s3store; httpapi (the HTTP API and its
//	               client), httpapi/events (the event stream), httpapi/page
//	               (the live page), prometheus (metrics and alert rules)
//	examples/…     worker (the Worker), conveyor (its CLI), machines, chaos
package conveyor
