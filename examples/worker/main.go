// Command worker is a Worker (docs/spec.md#platform-names), built from the SDK: the HTTP
// API with its event stream, metrics and live run page, the Orchestration
// Layer (the Runner, the status writer), the job Worker and an NLM backend
// simulator, on the embedded default store (a directory) or on S3/MinIO.
//
//	go run ./examples/worker                        # everything, ./data, 127.0.0.1:8080
//	go run ./examples/worker -role api              # HTTP only: reads the store, submits runs
//	go run ./examples/worker -role runner -owner r1 # the status writer: executes runs and jobs
//
// Any number of processes may share one store: -role api serves the API
// (every stream sees every process's changes, since events come from the
// store), -role runner processes execute runs and jobs. SIGINT or SIGTERM
// drains and stops within -drain.
//
// S3 or MinIO instead of the directory: set -s3-bucket (or
// CONVEYOR_S3_BUCKET) and the standard AWS variables, plus -s3-endpoint (or
// AWS_ENDPOINT_URL) for MinIO.
//
// At start the Worker checks that its store keeps the promises it rests on
// (a create-only write over an existing key fails, a stale If-Match fails,
// ...) with a few writes under probe/ that it removes; a store that fails
// refuses to start, naming the failed checks, unless -allow-unsafe-store
// (docs/stores.md).
//
// -retention 168h deletes finished history a week after it finished (a
// janitor on every process; one pass an hour across them), with per-kind
// overrides in -retention-ages; -print-s3-lifecycle prints the bucket
// lifecycle rules that do the same by age alone (docs/retention.md).
//
// OTEL_EXPORTER_OTLP_ENDPOINT (and the exporter's other standard OTEL_
// variables) exports OpenTelemetry spans over OTLP/HTTP (docs/spec.md#tracing).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/runconveyor/conveyor/lifecycle/retention"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := runWorker(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// runWorker is the whole program, testable in-process: ready, when set, receives
// the address the HTTP server listens on (empty without one) once serving.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(addr string)) error {
	opts, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if opts.printS3 {
		var agents []string
		if !opts.noDemo {
			agents = []string{AgentResearch, AgentApproval, AgentNLM}
		}
		b, err := retention.S3Lifecycle(opts.retention, opts.s3Prefix, agents)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	w, err := build(ctx, opts, stderr)
	if err != nil {
		return err
	}
	return w.serve(ctx, ready)
}
