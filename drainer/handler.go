package drainer

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/worker"
)

// Job is one delivery of a job to a handler. It is worker.Job: in-process
// handlers and gRPC workers see the same type.
type Job = worker.Job

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

// The failure types a handler returns are the worker package's, so that a
// handler's verdict means the same in process and over gRPC.
type (
	// PermanentError marks a failure that retrying cannot fix.
	PermanentError = worker.PermanentError
	// RetryAfterError asks for the next attempt no sooner than After.
	RetryAfterError = worker.RetryAfterError
)

// Permanent wraps err so the job goes to the dead-letter queue.
func Permanent(err error) error { return worker.Permanent(err) }

// RetryAfter wraps err with a least delay before the next attempt.
func RetryAfter(err error, d time.Duration) error { return worker.RetryAfter(err, d) }

// IsPermanent reports whether err asks for dead-lettering.
func IsPermanent(err error) bool { return worker.IsPermanent(err) }

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
