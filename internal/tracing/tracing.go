// Package tracing is sluice's OpenTelemetry tracing: process setup (an
// OTLP/gRPC exporter behind a batching tracer provider, installed as the
// global provider), the names and attributes of sluice's spans, and the
// helpers that carry W3C trace context (traceparent, tracestate) from a
// client's gRPC metadata into a job's envelope and from the envelope to
// the worker.
//
// Tracing is off unless Setup runs (cmd/gateway and cmd/drainer call it
// for --otlp-endpoint). Off, the global provider makes non-recording spans
// that only pass their parent's context along, so a submitter's trace
// context still reaches the worker, at the cost of a few small
// allocations per job.
//
// The span tree of one job (every span carries sluice.job_id,
// sluice.tenant and sluice.lane):
//
//	client span (the submitter's, from its traceparent; else the job starts a trace)
//	└── sluice.admit       gateway: the job's checks (validation, idempotency, rate, backlog)
//	    └── sluice.enqueue gateway: routing and the durable send; the envelope stores its context
//	        ├── sluice.move     drainer: spill or backlog (sluice.action, sluice.reason,
//	        │                   sluice.queue → sluice.destination)
//	        ├── sluice.defer    drainer: held back on a sideline queue for a while
//	        ├── sluice.deliver  drainer: one attempt (sluice.attempt, sluice.outcome);
//	        │   │               the worker gets its context as its parent
//	        │   └── sluice.move retry or dead_letter after that attempt failed
//	        ├── sluice.replay   drainer: moved back from the dead-letter queue by a replay
//	        └── sluice.drop     drainer: deleted past its TTL
//
// The envelope's context is written once, at submit, and kept across every
// move, so all of a job's spans are in one trace however long it waits:
// the drainer's spans are children of the stored sluice.enqueue context
// (parent-child rather than links, although that span ended long before),
// and a move caused by a failed attempt is a child of that attempt's
// sluice.deliver span. Each job of a SubmitBatch has its own sluice.admit;
// they share the caller's trace when it sent one.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Config configures Setup.
type Config struct {
	// Endpoint is the OTLP/gRPC collector: host:port (plain text, as to a
	// local collector or agent), or a URL, http://host:port for plain text
	// or https://host:port for TLS. Required.
	Endpoint string
	// ServiceName is the service.name resource attribute, e.g.
	// "sluice-gateway"; OTEL_SERVICE_NAME overrides it.
	ServiceName string
}

// Setup starts exporting spans to cfg.Endpoint and installs the provider
// and the W3C trace-context propagator as OpenTelemetry's globals. The
// exporter connects lazily and honours the OTEL_EXPORTER_OTLP_* settings
// the endpoint does not fix (headers, timeout, compression, certificate);
// the provider honours OTEL_TRACES_SAMPLER (default: follow the parent,
// else sample everything), OTEL_BSP_* and OTEL_RESOURCE_ATTRIBUTES.
// shutdown flushes the spans not yet exported and stops the exporter; call
// it once, at exit, with a deadline.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	opts, err := endpointOptions(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("trace resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// endpointOptions turns --otlp-endpoint into the exporter's endpoint
// options, refusing what the exporter would only fail on later.
func endpointOptions(endpoint string) ([]otlptracegrpc.Option, error) {
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("otlp endpoint %q: want host:port, http://host:port or https://host:port", endpoint)
		}
		return []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(endpoint)}, nil
	}
	if host, port, err := net.SplitHostPort(endpoint); err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("otlp endpoint %q: want host:port, http://host:port or https://host:port", endpoint)
	}
	return []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure()}, nil
}
