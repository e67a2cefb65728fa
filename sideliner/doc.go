// Package sideliner is the drainer's per-message policy: for each message
// read from a lane's shard, spillover or backlog queue it decides whether to
// deliver it now or to sideline it (seed 003: "Sidelining excess traffic",
// "Sidelining old traffic", "Dropping old messages", "Limiting threads per
// workload", "Using delay queues"), and after a failed delivery whether to
// retry it with backoff or dead-letter it. It does no I/O.
//
// [Policy.Decide] and [Policy.AfterFailure] are pure functions: time,
// whether the tenant's read-ahead is full, and randomness (jitter) are
// inputs. Which held job runs next, and tenants' rates and shares, are the
// scheduler's (package scheduler): a tenant over its fair rate is served
// after the others, never held back here.
//
// # Decide
//
// Delay is set only for Defer and Requeue. Row 4 applies only when
// StalenessBound > 0 and EnqueuedAt is set.
//
//	| # | condition (first match wins)      | shard      | spillover  | backlog    | reason             |
//	|---|-----------------------------------|------------|------------|------------|--------------------|
//	| 1 | envelope cannot be decoded        | DeadLetter | DeadLetter | DeadLetter | malformed_envelope |
//	| 2 | ExpiresAt set and Now ≥ ExpiresAt | Drop       | Drop       | Drop       | ttl_expired        |
//	| 3 | Attempts ≥ MaxAttempts            | DeadLetter | DeadLetter | DeadLetter | attempts_exhausted |
//	| 4 | Now − EnqueuedAt > StalenessBound | Backlog    | not judged | not judged | stale              |
//	| 5 | the tenant's read-ahead is full   | Spill      | Defer*     | Defer*     | read_ahead_full    |
//	| 6 | otherwise                         | Deliver    | Deliver    | Deliver    | within_limits      |
//
//	Defer*: Requeue instead when ReceiveCount ≥ MaxReceives (the last receive
//	before the backend would redrive the message to the dead-letter queue).
//	Delay = min(MaxDelay, d + Jitter·d), d = min(DeferDelay·2^(ReceiveCount−1), DeferCap).
//
// Boundaries: a job is expired exactly at ExpiresAt; a job is stale only
// past StalenessBound (exactly at the bound it is fresh); a job with
// Attempts = MaxAttempts−1 gets its last delivery. A zero EnqueuedAt is an
// unknown age and never stale; a zero ExpiresAt is no TTL; a zero
// StalenessBound turns backlogging off. An unknown Source is treated as
// backlog, the choice that never moves a message to another queue.
//
// Why this order: a malformed envelope has no trustworthy fields; an expired
// job is worthless however it got there, so it costs a delete and not a
// dead-letter page; exhausted jobs never reach a worker again; staleness is
// a property of the message and is settled before the tenant's state, so an
// old wave leaves the hot path whoever owns it; the tenant's read-ahead
// comes last.
//
// Staleness is judged on shard reads only. A backlog message is old by
// definition and is never backlogged again; a spillover message that has
// grown stale is delivered when its tenant's read-ahead has room, because the
// spillover and backlog queues share the drainer's guaranteed minority
// share and a second move would buy no ordering for two more calls and
// another duplicate risk. A job thus moves to another queue at most once
// between two delivery attempts. Held-back jobs on the sideline queues are
// deferred, not re-spilled (which would churn), with a delay that doubles
// per receive so a long-busy tenant's jobs are polled less and less;
// on the last receive before redrive they are requeued, so waiting for a
// busy tenant never dead-letters a job.
//
// # Lookout
//
// Rule 5 is applied only where it can pay: [Lookout] tells the drainer
// whether some tenant read from a shard is short of held jobs (quiet, or
// crowded out), so that reading past the shard's full tenants may find its
// next job. When none is, the drainer holds a full tenant's job instead of spilling it,
// and reads the shards at the workers' pace, with a probe now and then.
//
// # AfterFailure
//
//	| # | condition (first match wins)               | action            | reason               |
//	|---|--------------------------------------------|-------------------|----------------------|
//	| 1 | worker says Permanent                      | DeadLetter        | permanent_failure    |
//	| 2 | Attempts ≥ MaxAttempts (this one included) | DeadLetter        | attempts_exhausted   |
//	| 3 | ExpiresAt set and Now + delay ≥ ExpiresAt  | Drop              | expires_before_retry |
//	| 4 | otherwise                                  | Retry after delay | retryable_failure    |
//
//	delay   = min(MaxDelay, max(RetryAfter, backoff))
//	backoff = RetryBase + Jitter·(ceiling − RetryBase), ceiling = min(RetryCap, RetryBase·2^(Attempts−1))
//
// # Carrying out a decision
//
//	| action     | drainer I/O                                                                                   |
//	|------------|-----------------------------------------------------------------------------------------------|
//	| Deliver    | hold for the scheduler; in a slot: deliver, heartbeat; ack → delete; error → AfterFailure       |
//	| Spill      | send the envelope to the lane's spillover queue, then delete (batched per receive)            |
//	| Backlog    | hold as backlog work, or when that read-ahead is full send to the backlog queue, then delete  |
//	| Drop       | delete; count and log (never silent)                                                          |
//	| DeadLetter | send the envelope with dead_letter_reason = Reason to the lane's DLQ, then delete             |
//	| Defer      | ChangeVisibility(Delay) on the current queue                                                  |
//	| Requeue    | send the envelope to the current queue with Delay, then delete                                |
//	| Retry      | send the envelope with attempts + 1 to the current queue with Delay, then delete              |
//
// Moves are send-then-delete: a duplicate is possible, a loss is not. The
// envelope keeps EnqueuedAt, ExpiresAt and the attempt count across every
// move; the queue's receive count does not survive a move, which is why
// attempts are counted in the envelope and bounded by MaxAttempts here.
package sideliner
