// Package client submits jobs to a sluice gateway.
//
// A Client holds one gRPC connection and sends the tenant's API key as
// "authorization: Bearer <key>" on every call. Submit sends one job;
// SubmitBatch sends any number, split into calls the gateway accepts (at
// most 500 jobs and a few MiB each), and reports each job's outcome. A
// Producer (Client.NewProducer) sends asynchronously: Send returns a
// Future at once, and the jobs of many concurrent senders are merged into
// SubmitBatch calls, so code that submits one job at a time from many
// goroutines gets the throughput of batches.
//
// # Retries
//
// Every job gets an idempotency key (generated when the caller gives none)
// that stays the same across the client's retries, so a retry of a job the
// gateway already stored answers the first job's id with Duplicate set
// instead of enqueueing it twice. The client retries only what is safe:
//
//   - RESOURCE_EXHAUSTED with a RetryInfo (tenant over its submit rate, or
//     its lane's backlog at the high-water mark): after the delay the
//     gateway asked for, plus a little jitter (at most 5 ms), when that
//     delay is at most Config.MaxRetryWait. The gateway tells callers
//     refused together the times of successive tokens, and holds each
//     token for its caller until a little after its time, so a caller
//     that comes back when told is admitted; in a batch, each refused job
//     is retried at its own time;
//   - UNAVAILABLE (the gateway could not store the job, or could not be
//     reached): after an exponential backoff with jitter, and at least
//     the RetryInfo delay the gateway gives with it (1 s when its store
//     did not take the job), up to MaxRetryWait; but not a TLS
//     mismatch that is certain (a TLS client answered in plaintext, a
//     certificate not trusted, the client's or the gateway's certificate
//     expired or not yet valid), which comes back at once. The error of a
//     mismatch, or of a likely one, ends with a hint of what to change;
//   - DEADLINE_EXCEEDED of one attempt when Config.AttemptTimeout is set
//     and the caller's context is still live.
//
// Nothing else is retried: INVALID_ARGUMENT, UNAUTHENTICATED and the like
// come back at once. Retries stop at Config.MaxAttempts, when the caller's
// context ends, or when the next wait would outlast the context's deadline.
//
// The gateway remembers idempotency keys for its idempotency window (10
// minutes by default). On its embedded backend a key is stored with its
// job, so a retry after the gateway restarted still gets the first job's
// id; on SQS the keys are remembered per gateway process, and a retry that
// reaches another gateway, or one that restarted, is enqueued again.
// Delivery is at least once anyway, so workers must be idempotent on the
// job id.
//
// # Errors
//
// Refusals come back as typed errors that also carry the gRPC status
// (status.Code works on every error this package returns):
//
//   - *QuotaError: the tenant is over its submit rate; RetryAfter says when
//     a token is available.
//   - *BacklogError: the tenant's lane has too many jobs waiting for its
//     tier; RetryAfter is the time the lane needs to drain back under.
//   - *InvalidArgumentError: the job broke a request limit; Violations name
//     the fields. A job no gateway can take (a string that is not UTF-8, a
//     payload over 160 KiB, a job over 17 MiB) is refused so before it is
//     sent; a tenant's own, lower, limits are the gateway's to check.
//
// A call after Client.Close, or cut short by it, fails with
// ErrClientClosed (errors.Is). Other failures (UNAUTHENTICATED,
// UNAVAILABLE after the last attempt, a context error) are returned as the
// gRPC status error, wrapped with context. Submit and a Producer's Future wrap every error of a job in a
// *JobError, which carries the job's idempotency key: a job given up on
// after UNAVAILABLE or a deadline may have been stored all the same, and
// resubmitted with that key it is stored once.
package client
