// Package otlp exports the SDK's OpenTelemetry spans (docs/spec.md#tracing)
// over OTLP/HTTP, configured by the exporter's standard OTEL_ variables: the
// TracerProvider to give the engines (run.Config, jobqueue.Config, or the
// Client's Config.TracerProvider), the counterpart of the Client's
// Config.Metrics for metrics.
package otlp

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// FromEnv returns an OTLP/HTTP exporting TracerProvider when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set,
// configured by the exporter's other OTEL_EXPORTER_OTLP_* variables
// (headers, timeout, compression), its spans named service unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise. With neither
// variable it returns a nil provider, with which the SDK traces nothing.
// shutdown flushes the spans not yet sent, given at least a second even
// when its context ends sooner (a program's drain that spent its time
// waiting still exports the spans of that drain); it is never nil.
func FromEnv(ctx context.Context, service string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	// Later options win: the environment overrides the default name.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil {
		return nil, nil, fmt.Errorf("the trace resource: %w", err)
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, func(ctx context.Context) error {
		if d, ok := ctx.Deadline(); ok && time.Until(d) < time.Second {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
		}
		return p.Shutdown(ctx)
	}, nil
}
