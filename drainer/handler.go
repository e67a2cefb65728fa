package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Job is one delivery of a job to a worker.
type Job struct {
	ID         string
	Tenant     string
	Lane       string
	Payload    []byte
	Attributes map[string]string
	// Attempt is 1 on the first delivery.
	Attempt    int
	EnqueuedAt time.Time
	// TraceContext holds the W3C trace headers (traceparent, tracestate)
	// of this delivery: its sluice.deliver span's when tracing is on,
	// else the submitter's, if it sent any. Handle's ctx carries the same
	// span context, for handlers using OpenTelemetry.
	TraceContext map[string]string
}

// Handler processes jobs. It must be idempotent on Job.ID: delivery is at
// least once. A nil error acks the job. An error wrapped with Permanent
// sends it to the dead-letter queue; any other error retries it later
// (RetryAfter sets the least delay).
type Handler interface {
	Handle(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) error { return f(ctx, job) }

// PermanentError marks a failure that retrying cannot fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the job goes to the dead-letter queue.
func Permanent(err error) error { return &PermanentError{Err: err} }

// RetryAfterError asks for the next attempt no sooner than After.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.After)
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err with a least delay before the next attempt.
func RetryAfter(err error, d time.Duration) error { return &RetryAfterError{Err: err, After: d} }

// IsPermanent reports whether err asks for dead-lettering.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// LogHandler is the built-in sink: it logs each job and acks it.
type LogHandler struct {
	Logger *slog.Logger
}

// Handle logs job at info level.
func (h LogHandler) Handle(ctx context.Context, job *Job) error {
	h.Logger.InfoContext(ctx, "job delivered",
		slog.String("job_id", job.ID),
		slog.String("tenant", job.Tenant),
		slog.String("lane", job.Lane),
		slog.Int("attempt", job.Attempt),
		slog.Int("payload_bytes", len(job.Payload)),
		slog.String("payload_preview", preview(job.Payload, 64)),
		slog.Duration("dwell", time.Since(job.EnqueuedAt)),
	)
	return nil
}

// preview returns up to n bytes of b as text, marking truncation.
func preview(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
