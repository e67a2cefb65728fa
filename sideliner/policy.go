package sideliner

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// MaxDelay is the longest delay any decision carries: the per-message delay
// limit of the queue contract and of Amazon SQS (15 minutes).
const MaxDelay = queue.MaxDelay

// Defaults for Policy fields left zero.
const (
	// MaxAttemptsDefault is the number of delivery attempts before a job
	// is dead-lettered.
	MaxAttemptsDefault = 5
	// MaxReceivesDefault matches topology.MaxReceiveCountDefault, the
	// receives after which the backend redrives a message to the DLQ.
	MaxReceivesDefault = 5
	// DeferDelayDefault is the first delay of a deferred job.
	DeferDelayDefault = 5 * time.Second
	// DeferCapDefault is the longest a deferral's doubling goes: a job of
	// a tenant that is busy but not far over its rate is looked at again
	// within about a minute (two with jitter), however many times it was
	// received.
	DeferCapDefault = time.Minute
	// RetryBaseDefault is the first retry's delay.
	RetryBaseDefault = 2 * time.Second
	// RetryCapDefault is the longest retry delay (before a RetryAfter hint).
	RetryCapDefault = MaxDelay
)

// Source is the kind of queue a message was read from.
type Source int

// Sources. The zero Source is not valid; Decide treats any unknown Source
// as SourceBacklog, the choice that never moves a message between queues.
const (
	SourceShard     Source = iota + 1 // one of the lane's shard queues: the hot path
	SourceSpillover                   // the lane's spillover queue
	SourceBacklog                     // the lane's backlog queue
)

func (s Source) String() string {
	switch s {
	case SourceShard:
		return "shard"
	case SourceSpillover:
		return "spillover"
	case SourceBacklog:
		return "backlog"
	}
	return fmt.Sprintf("Source(%d)", int(s))
}

// Action is what the drainer does with a message. Each action is one I/O
// recipe; "move" means send a copy of the envelope, unchanged unless said
// otherwise, to the target queue with Decision.Delay, then delete the
// original (a duplicate is possible, a loss is not).
type Action int

// Actions. The zero Action is not valid and is never returned.
const (
	// Deliver hands the job to a worker, when the scheduler gives it a
	// slot.
	Deliver Action = iota + 1
	// Spill moves the message to the lane's spillover queue.
	Spill
	// Backlog moves the message to the lane's backlog queue.
	Backlog
	// Drop deletes the message. Count and log it: a drop is never silent.
	Drop
	// DeadLetter moves the message to the lane's dead-letter queue with
	// Decision.Reason recorded in the envelope's dead_letter_reason.
	DeadLetter
	// Defer leaves the message on its queue: ChangeVisibility to
	// Decision.Delay. One call, but the next receive counts.
	Defer
	// Requeue moves the message to the queue it was read from. Chosen
	// instead of Defer on the last receive before the backend would redrive
	// the message to the dead-letter queue: the copy starts with a receive
	// count of zero, so waiting for a busy tenant never dead-letters a job.
	Requeue
	// Retry (AfterFailure only) moves the message to the queue it was read
	// from with the envelope's attempts incremented, after Decision.Delay.
	Retry
)

func (a Action) String() string {
	switch a {
	case Deliver:
		return "deliver"
	case Spill:
		return "spill"
	case Backlog:
		return "backlog"
	case Drop:
		return "drop"
	case DeadLetter:
		return "dead_letter"
	case Defer:
		return "defer"
	case Requeue:
		return "requeue"
	case Retry:
		return "retry"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Reason is a stable, machine-readable cause of a Decision, fit for a metric
// label, a log attribute and the envelope's dead_letter_reason. Values never
// change once released.
type Reason string

// Reasons.
const (
	ReasonWithinLimits       Reason = "within_limits"        // Deliver
	ReasonMalformed          Reason = "malformed_envelope"   // DeadLetter
	ReasonTTLExpired         Reason = "ttl_expired"          // Drop
	ReasonAttemptsExhausted  Reason = "attempts_exhausted"   // DeadLetter
	ReasonStale              Reason = "stale"                // Backlog
	ReasonReadAheadFull      Reason = "read_ahead_full"      // Spill, Defer, Requeue
	ReasonPermanentFailure   Reason = "permanent_failure"    // DeadLetter
	ReasonRetryableFailure   Reason = "retryable_failure"    // Retry
	ReasonExpiresBeforeRetry Reason = "expires_before_retry" // Drop
	// ReasonPanic: an in-process handler panicked on the job's last
	// attempt; the dead-letter reason is "panic: " and the panic's value.
	ReasonPanic Reason = "panic" // DeadLetter
	// ReasonReleased: a job handed back unstarted on its last receive is
	// requeued, so that the backend does not dead-letter it unattempted.
	ReasonReleased Reason = "released" // Requeue
)

// Decision is the outcome of Decide or AfterFailure.
type Decision struct {
	Action Action
	Reason Reason
	// Delay applies to Defer, Requeue and Retry; it is zero otherwise and
	// always within [0, MaxDelay].
	Delay time.Duration
}

// Policy is one lane's sidelining and retry policy. The zero Policy is
// usable: zero fields take their defaults and backlogging is off. Decide and
// AfterFailure treat out-of-range values as their defaults or clamp them,
// so they never fail; Validate reports them.
type Policy struct {
	// StalenessBound is the age (now − EnqueuedAt) beyond which a job read
	// from a shard queue is moved to the backlog queue, so fresh jobs go
	// first. Zero disables backlogging; topology.Lane.StalenessBound holds
	// the lane's value.
	StalenessBound time.Duration
	// MaxAttempts is the number of delivery attempts after which a job is
	// dead-lettered. Defaults to 5.
	MaxAttempts int
	// MaxReceives is the source queue's redrive threshold
	// (topology.Topology.MaxReceiveCount). A job held back on its last
	// receive is requeued rather than deferred. Defaults to 5.
	MaxReceives int
	// DeferDelay is the delay of a job held back on its first receive; it
	// doubles with each further receive, up to DeferCap. Defaults to 5s.
	DeferDelay time.Duration
	// DeferCap bounds the doubling of DeferDelay. Receive counts grow with
	// every lost receive answer and every lease a crash drops, so without a
	// cap a large max receive count could hold a job back for MaxDelay
	// after its tenant is idle again. Defaults to 1m; at least DeferDelay.
	DeferCap time.Duration
	// RetryBase is the least retry delay and the first retry's ceiling.
	// Defaults to 2s.
	RetryBase time.Duration
	// RetryCap bounds the jittered backoff. Defaults to, and may not
	// exceed, MaxDelay (900s). A worker's RetryAfter hint may exceed it,
	// up to MaxDelay.
	RetryCap time.Duration
	// NoSideline turns sidelining off: Decide skips rules 4 and 5, so
	// every live job is delivered in the order it is read, and the
	// drainer schedules every job as one tenant's, with no tenant drain
	// limits. It makes a plain shared FIFO, the baseline the benchmarks
	// (bench/) compare against. Off by default.
	NoSideline bool
}

// WithDefaults returns a copy of p with zero fields set to their defaults.
// StalenessBound has no default: zero disables backlogging.
func (p Policy) WithDefaults() Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = MaxAttemptsDefault
	}
	if p.MaxReceives == 0 {
		p.MaxReceives = MaxReceivesDefault
	}
	if p.DeferDelay == 0 {
		p.DeferDelay = DeferDelayDefault
	}
	if p.DeferCap == 0 {
		p.DeferCap = max(DeferCapDefault, p.DeferDelay)
	}
	if p.RetryBase == 0 {
		p.RetryBase = RetryBaseDefault
	}
	if p.RetryCap == 0 {
		p.RetryCap = RetryCapDefault
	}
	return p
}

// Validate reports fields out of range, after defaults.
func (p Policy) Validate() error {
	p = p.WithDefaults()
	var errs []error
	if p.StalenessBound < 0 {
		errs = append(errs, errors.New("staleness bound must not be negative"))
	}
	if p.MaxAttempts < 1 {
		errs = append(errs, errors.New("max attempts must be at least 1"))
	}
	if p.MaxReceives < 1 {
		errs = append(errs, errors.New("max receives must be at least 1"))
	}
	if p.DeferDelay < 0 || p.DeferDelay > MaxDelay {
		errs = append(errs, fmt.Errorf("defer delay must not be negative or above %s", MaxDelay))
	}
	if p.DeferCap < p.DeferDelay || p.DeferCap > MaxDelay {
		errs = append(errs, fmt.Errorf("defer cap must not be below the defer delay or above %s", MaxDelay))
	}
	if p.RetryCap < 0 || p.RetryCap > MaxDelay {
		errs = append(errs, fmt.Errorf("retry cap must not be negative or above %s", MaxDelay))
	}
	if p.RetryBase < 0 || p.RetryBase > p.RetryCap {
		errs = append(errs, errors.New("retry base must not be negative or above the retry cap"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sideliner policy: %w", err)
	}
	return nil
}

// normalized applies defaults and clamps what Validate would refuse, so the
// decision functions are total.
func (p Policy) normalized() Policy {
	p = p.WithDefaults()
	if p.MaxAttempts < 1 {
		p.MaxAttempts = MaxAttemptsDefault
	}
	if p.MaxReceives < 1 {
		p.MaxReceives = MaxReceivesDefault
	}
	if p.DeferDelay < 0 {
		p.DeferDelay = DeferDelayDefault
	}
	p.DeferDelay = min(p.DeferDelay, MaxDelay)
	p.DeferCap = min(max(p.DeferCap, p.DeferDelay), MaxDelay)
	if p.RetryCap < 0 {
		p.RetryCap = RetryCapDefault
	}
	p.RetryCap = min(p.RetryCap, MaxDelay)
	if p.RetryBase < 0 {
		p.RetryBase = RetryBaseDefault
	}
	p.RetryBase = min(p.RetryBase, p.RetryCap)
	return p
}

// Input is what Decide knows about one received message and its tenant.
type Input struct {
	// Now is the time of the decision.
	Now time.Time
	// Source is the kind of queue the message was read from.
	Source Source
	// Malformed means the envelope could not be decoded; no other field
	// is then trusted.
	Malformed bool
	// EnqueuedAt is when the gateway accepted the job, kept across moves.
	// Zero means unknown: the job is never judged stale.
	EnqueuedAt time.Time
	// ExpiresAt is the job's TTL deadline. Zero means no TTL.
	ExpiresAt time.Time
	// Attempts is the number of delivery attempts already made (the
	// envelope's count, kept across moves).
	Attempts int
	// ReceiveCount counts receives on the current queue, including this
	// one (queue.Message.ReceiveCount). It resets when a message is moved.
	ReceiveCount int
	// ReadAheadFull means the drainer already holds as many of the
	// tenant's jobs as it reads ahead for one tenant (package scheduler):
	// this one must wait on a queue, so that others' jobs behind it are
	// seen.
	ReadAheadFull bool
	// Jitter is a uniform random number in [0, 1) supplied by the caller
	// (values outside are clamped). It spreads a deferral d over [d, 2d) so
	// that a batch of held-back jobs does not come back at once. Zero gives
	// deterministic delays.
	Jitter float64
}

// Decide chooses what to do with a received message. It is a pure function
// of p and in. The first matching rule wins:
//
//  1. Malformed → DeadLetter (malformed_envelope).
//  2. ExpiresAt set and Now ≥ ExpiresAt → Drop (ttl_expired).
//  3. Attempts ≥ MaxAttempts → DeadLetter (attempts_exhausted).
//  4. From a shard, StalenessBound > 0, EnqueuedAt known and
//     Now − EnqueuedAt > StalenessBound → Backlog (stale).
//  5. The tenant's read-ahead is full (read_ahead_full): from a shard →
//     Spill; from spillover or backlog → Defer, or Requeue when
//     ReceiveCount ≥ MaxReceives.
//  6. Otherwise → Deliver (within_limits).
//
// With NoSideline, rules 4 and 5 are skipped.
//
// Staleness is judged only on shard reads. A backlog message is old by
// definition and is never backlogged again. A spillover message that has
// grown stale is delivered when its tenant is within limits rather than
// moved again: the spillover and backlog queues are both served by the same
// guaranteed minority share, so a second move would cost two more calls and
// another chance of a duplicate without putting fresh work first. A job
// thus moves to another queue at most once between two delivery attempts.
func (p Policy) Decide(in Input) Decision {
	p = p.normalized()
	switch {
	case in.Malformed:
		return Decision{Action: DeadLetter, Reason: ReasonMalformed}
	case expired(in.Now, in.ExpiresAt):
		return Decision{Action: Drop, Reason: ReasonTTLExpired}
	case in.Attempts >= p.MaxAttempts:
		return Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}
	case p.NoSideline:
		return Decision{Action: Deliver, Reason: ReasonWithinLimits}
	case in.Source == SourceShard && p.stale(in.Now, in.EnqueuedAt):
		return Decision{Action: Backlog, Reason: ReasonStale}
	}
	if !in.ReadAheadFull {
		return Decision{Action: Deliver, Reason: ReasonWithinLimits}
	}
	reason := ReasonReadAheadFull
	if in.Source == SourceShard {
		return Decision{Action: Spill, Reason: reason}
	}
	action := Defer
	if in.ReceiveCount >= p.MaxReceives {
		action = Requeue
	}
	return Decision{Action: action, Reason: reason, Delay: p.deferDelay(in)}
}

// expired reports whether a job with the TTL deadline expiresAt has expired
// at now. A job is live in [accepted, expiresAt): at the deadline it is gone.
func expired(now, expiresAt time.Time) bool {
	return !expiresAt.IsZero() && !now.Before(expiresAt)
}

// stale reports whether a job accepted at enqueuedAt is past the staleness
// bound at now: exactly at the bound it is still fresh.
func (p Policy) stale(now, enqueuedAt time.Time) bool {
	return p.StalenessBound > 0 && !enqueuedAt.IsZero() && now.Sub(enqueuedAt) > p.StalenessBound
}

// deferDelay is DeferDelay doubled for each receive after the first up to
// DeferCap, spread by Jitter, within MaxDelay.
func (p Policy) deferDelay(in Input) time.Duration {
	d := doubled(p.DeferDelay, max(in.ReceiveCount, 1)-1, p.DeferCap)
	return min(d+time.Duration(unit(in.Jitter)*float64(d)), MaxDelay)
}

// FailureClass classifies a failed delivery.
type FailureClass int

// Failure classes. The zero value is Retryable: an unclassified error is
// retried, never lost.
const (
	Retryable FailureClass = iota // worth another attempt later
	Permanent                     // retrying cannot fix it
)

func (c FailureClass) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Permanent:
		return "permanent"
	}
	return fmt.Sprintf("FailureClass(%d)", int(c))
}

// FailureInput is what AfterFailure knows about a failed delivery.
type FailureInput struct {
	// Now is the time of the decision.
	Now time.Time
	// Class is the worker's verdict. Unknown values count as Retryable.
	Class FailureClass
	// RetryAfter is the worker's least delay before the next attempt
	// (an HTTP Retry-After, a gRPC RetryInfo); zero if none.
	RetryAfter time.Duration
	// Attempts counts delivery attempts including the one that failed.
	Attempts int
	// ExpiresAt is the job's TTL deadline. Zero means no TTL.
	ExpiresAt time.Time
	// Jitter is a uniform random number in [0, 1) supplied by the caller
	// (values outside are clamped); see Policy.Backoff.
	Jitter float64
}

// AfterFailure chooses what to do after a failed delivery. It is a pure
// function of p and in. The first matching rule wins:
//
//  1. Class Permanent → DeadLetter (permanent_failure).
//  2. Attempts ≥ MaxAttempts → DeadLetter (attempts_exhausted).
//  3. ExpiresAt set and Now + delay ≥ ExpiresAt → Drop
//     (expires_before_retry): the retry would only be dropped on arrival.
//  4. Otherwise → Retry (retryable_failure) after
//     delay = min(max(Backoff(Attempts, Jitter), RetryAfter), MaxDelay).
//
// A failure is classified before the TTL is looked at, so a job that fails
// permanently reaches the dead-letter queue (and its alarm) even if it has
// expired; the TTL only decides whether a retry is worth scheduling.
func (p Policy) AfterFailure(in FailureInput) Decision {
	p = p.normalized()
	if in.Class == Permanent {
		return Decision{Action: DeadLetter, Reason: ReasonPermanentFailure}
	}
	if in.Attempts >= p.MaxAttempts {
		return Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}
	}
	d := max(p.Backoff(in.Attempts, in.Jitter), min(in.RetryAfter, MaxDelay))
	if expired(in.Now.Add(d), in.ExpiresAt) {
		return Decision{Action: Drop, Reason: ReasonExpiresBeforeRetry}
	}
	return Decision{Action: Retry, Reason: ReasonRetryableFailure, Delay: d}
}

// Backoff returns the delay before the retry that follows the given attempt
// (1 for the first): exponential with jitter,
//
//	ceiling = min(RetryCap, RetryBase · 2^(attempt−1))
//	delay   = RetryBase + jitter · (ceiling − RetryBase)
//
// so delays spread over the whole window like full jitter but never fall
// below RetryBase (a zero delay would bring a job straight back to a worker
// that just failed). jitter is clamped to [0, 1]; attempt below 1 counts as
// 1. The result is within [RetryBase, RetryCap] ⊆ [0, MaxDelay].
func (p Policy) Backoff(attempt int, jitter float64) time.Duration {
	p = p.normalized()
	ceiling := doubled(p.RetryBase, max(attempt, 1)-1, p.RetryCap)
	return p.RetryBase + time.Duration(unit(jitter)*float64(ceiling-p.RetryBase))
}

// doubled returns min(limit, base·2^n) without overflow, for base ≥ 0.
func doubled(base time.Duration, n int, limit time.Duration) time.Duration {
	d := min(base, limit)
	for i := 0; i < n && d > 0 && d < limit; i++ {
		d = min(2*d, limit) // d < limit ≤ MaxDelay, so 2·d cannot overflow
	}
	return d
}

// unit clamps a jitter value to [0, 1]; NaN counts as 0.
func unit(j float64) float64 {
	if !(j > 0) { // also catches NaN
		return 0
	}
	return min(j, 1)
}
