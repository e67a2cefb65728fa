package client

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// Defaults for ProducerConfig fields left zero.
const (
	LingerDefault      = 200 * time.Microsecond
	MaxInFlightDefault = 8
	MaxPendingDefault  = 10_000
)

// ErrProducerClosed is Send's error after Close, and the error of jobs
// Close had to abandon when its context ended.
var ErrProducerClosed = errors.New("sluice: producer closed")

// ProducerConfig configures a Producer. The client's Config supplies the
// retry settings (MaxAttempts, backoff, MaxRetryWait, AttemptTimeout).
type ProducerConfig struct {
	// Linger is how long a batch that is not full waits for more jobs
	// before it is sent, counted from its oldest job, while other calls
	// are under way; with none under way it is sent at once, so a lone
	// job pays no linger and under load the jobs sent during a call
	// gather behind it. Jobs sent while every call slot is busy wait for
	// a slot anyway and join the next batch. Defaults to 200µs;
	// negative never lingers. (A longer linger makes fewer, bigger calls,
	// and costs each caller that waits for its answer: with 1ms and 4
	// calls in flight, 256 such callers got about a fifth fewer jobs
	// through than with the defaults.)
	Linger time.Duration
	// MaxBatchJobs and MaxBatchBytes bound one SubmitBatch call. They
	// default to the client's Config.MaxBatchJobs and MaxBatchBytes, and
	// are capped, as those are, at the gateway's limits.
	MaxBatchJobs  int
	MaxBatchBytes int
	// MaxInFlight bounds the SubmitBatch calls under way at once.
	// Defaults to 8.
	MaxInFlight int
	// MaxPending bounds the jobs sent and not yet settled (waiting,
	// in flight, or waiting to retry); Send blocks while it is reached.
	// Defaults to 10,000.
	MaxPending int
}

func (c ProducerConfig) withDefaults(cc Config) ProducerConfig {
	c.Linger = cmp.Or(c.Linger, LingerDefault)
	c.MaxBatchJobs = min(cmp.Or(c.MaxBatchJobs, cc.MaxBatchJobs), MaxBatchJobs)
	c.MaxBatchBytes = min(cmp.Or(c.MaxBatchBytes, cc.MaxBatchBytes), MaxBatchBytes)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, MaxInFlightDefault)
	c.MaxPending = cmp.Or(c.MaxPending, MaxPendingDefault)
	return c
}

// validate names each bad field and what it may be (it printed the whole
// config, naming none).
func (c ProducerConfig) validate() error {
	var bad []string
	for _, f := range []struct {
		name  string
		value int
		def   string
	}{
		{"MaxBatchJobs", c.MaxBatchJobs, fmt.Sprintf("give 1 to %d (0 takes the client's MaxBatchJobs)", MaxBatchJobs)},
		{"MaxBatchBytes", c.MaxBatchBytes, fmt.Sprintf("give 1 to %d (0 takes the client's MaxBatchBytes)", MaxBatchBytes)},
		{"MaxInFlight", c.MaxInFlight, fmt.Sprintf("give 1 or more (0 takes the default, %d)", MaxInFlightDefault)},
		{"MaxPending", c.MaxPending, fmt.Sprintf("give 1 or more (0 takes the default, %d)", MaxPendingDefault)},
	} {
		if f.value < 1 {
			bad = append(bad, fmt.Sprintf("%s is %d: %s", f.name, f.value, f.def))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// Producer sends jobs asynchronously: Send queues a job and returns at
// once, and the producer merges the jobs of all its callers into
// SubmitBatch calls (up to MaxBatchJobs jobs or MaxBatchBytes, at once
// when no call is under way, else after at most Linger; at most
// MaxInFlight calls at once). It is safe for concurrent use; make one
// per client and share it.
//
// Each job keeps its idempotency key (generated if it has none) across
// retries. A job refused for the tenant's rate or lane backlog is retried
// at the time the gateway's RetryInfo names for it, and jobs not sent yet
// wait until then too, so an over-rate producer slows to the tenant's
// rate instead of spinning; after UNAVAILABLE or an attempt's timeout the
// producer backs off as Client.Submit does. Refusals for rate or backlog
// are retried however many there are (each waits its hint, and MaxPending
// holds the senders back meanwhile); other failures within
// Config.MaxAttempts. A job fails when its attempts are used up, a hint
// is longer than Config.MaxRetryWait, it is refused for good (invalid), or
// Close gives up on it.
type Producer struct {
	c   *Client
	cfg ProducerConfig

	mu        sync.Mutex
	wake      chan struct{} // signals the dispatcher; capacity 1
	room      chan struct{} // closed and replaced when pending drops below MaxPending
	fresh     []*pjob       // never sent, in Send order
	freshSize int           // of fresh's jobs (pjob.size)
	retries   []*pjob       // waiting for due, sorted by due
	pending   int           // sent to the producer and not settled
	inFlight  int           // calls under way
	holdUntil time.Time     // fresh jobs wait until then (a refusal's hint)
	gens      []*flushGen   // open generations, oldest first; the last takes new jobs
	closed    bool

	ctx    context.Context // of the calls; cancelled when Close gives up
	cancel context.CancelFunc
	done   chan struct{} // closed when the dispatcher and every call ended
}

// pjob is one job in the producer.
type pjob struct {
	req      *ingestv1.SubmitRequest
	size     int
	fut      Future // returned by Send: one allocation for both
	gen      *flushGen
	attempts int
	hinted   int       // of the attempts, those refused with a hint (rate, backlog)
	queued   time.Time // when it became ready to send
	due      time.Time // of a retry
}

// flushGen counts the unsettled jobs sent between two Flushes.
type flushGen struct {
	n      int
	sealed bool
	done   chan struct{}
}

// Future is the outcome of a job sent to a Producer.
type Future struct {
	done chan struct{}
	res  *Result // &result once accepted
	err  error
	// result is the accepted job's Result, allocated with the future
	// (and the job): an allocation of its own per job was a tenth of
	// the producer's.
	result Result
}

// Done is closed once the job is settled.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait waits until the job is settled, or ctx ends, and returns its
// outcome as Client.Submit would: the accepted (or duplicate) job, or a
// *JobError with the job's idempotency key and the last refusal
// (*QuotaError, *BacklogError, *InvalidArgumentError) or call failure. A
// ctx that ends only stops the waiting, not the job; a job settled
// already answers its outcome whatever ctx.
func (f *Future) Wait(ctx context.Context) (*Result, error) {
	select {
	case <-f.done:
		return f.res, f.err
	default:
	}
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return nil, fmt.Errorf("sluice: waiting for a job: %w", ctx.Err())
	}
}

// NewProducer returns a producer that sends through c. Close it before
// closing c. It fails with ErrClientClosed once c is closed.
func (c *Client) NewProducer(cfg ProducerConfig) (*Producer, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("sluice producer: %w", ErrClientClosed)
	}
	cfg = cfg.withDefaults(c.cfg)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sluice producer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Producer{
		c: c, cfg: cfg,
		wake: make(chan struct{}, 1), room: make(chan struct{}),
		gens: []*flushGen{{done: make(chan struct{})}},
		ctx:  ctx, cancel: cancel, done: make(chan struct{}),
	}
	go p.dispatch()
	return p, nil
}

// Send queues job and returns its future. It blocks only while
// MaxPending jobs are unsettled, until ctx ends; it fails with
// ErrProducerClosed after Close, and with an *InvalidArgumentError for a
// job that cannot be encoded (a string that is not valid UTF-8), which
// would fail the whole batch it went in, or that is over the gateway's
// hard ceilings (a payload over 160 KiB, a job over 17 MiB). Send copies
// the job's payload and attributes, so the caller may reuse them once it
// returns.
func (p *Producer) Send(ctx context.Context, job Job) (*Future, error) {
	req := job.request()
	if err := checkRequest(req); err != nil {
		return nil, fmt.Errorf("sluice: send: %w", err)
	}
	// The job is encoded when its batch goes out: keep it as it is now.
	req.Payload, req.Attributes = bytes.Clone(req.Payload), maps.Clone(req.Attributes)
	j := &pjob{req: req, size: proto.Size(req) + 8, fut: Future{done: make(chan struct{})}}
	p.mu.Lock()
	for p.pending >= p.cfg.MaxPending && !p.closed {
		room := p.room
		p.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return nil, fmt.Errorf("sluice: send: %w (%d jobs pending)", ctx.Err(), p.cfg.MaxPending)
		}
		p.mu.Lock()
	}
	if p.closed {
		p.mu.Unlock()
		return nil, ErrProducerClosed
	}
	p.pending++
	j.gen = p.gens[len(p.gens)-1]
	j.gen.n++
	j.queued = time.Now()
	p.fresh = append(p.fresh, j)
	p.freshSize += j.size
	// The dispatcher needs waking only when this job can change what it
	// decided: it is the first waiting (a batch to send, or to linger
	// from), or the waiting jobs fill a batch. Woken by every Send, it
	// scanned the waiting jobs again each time and re-armed its timer,
	// to the same decision.
	wake := len(p.fresh) == 1 || len(p.fresh) >= p.cfg.MaxBatchJobs || p.freshSize >= p.cfg.MaxBatchBytes
	p.mu.Unlock()
	if wake {
		p.signal()
	}
	return &j.fut, nil
}

// Flush sends every job sent before it without waiting for Linger, and
// waits until each is settled or ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	open := slices.Clone(p.gens)
	last := p.gens[len(p.gens)-1]
	last.sealed = true
	if last.n == 0 {
		close(last.done)
		p.gens = p.gens[:len(p.gens)-1]
	}
	p.gens = append(p.gens, &flushGen{done: make(chan struct{})})
	p.mu.Unlock()
	p.signal()
	for _, g := range open {
		// Settled jobs first: with ctx ended too, a select alone chose
		// at random, and reported jobs settled already as given up.
		select {
		case <-g.done:
			continue
		default:
		}
		select {
		case <-g.done:
		case <-ctx.Done():
			return fmt.Errorf("sluice: flush: %w", ctx.Err())
		}
	}
	return nil
}

// Close stops Send and waits, as Flush does, for the jobs already sent.
// If ctx ends first, the calls under way are cancelled and the jobs not
// settled fail with ErrProducerClosed (they may have been stored all the
// same: resubmit them with the idempotency keys their *JobError carries to
// be sure); Close then returns ctx's error. Safe to call twice.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	close(p.room) // wakes blocked Sends, which see closed
	p.room = make(chan struct{})
	p.mu.Unlock()
	err := p.Flush(ctx)
	p.cancel()
	<-p.done
	if err != nil {
		return fmt.Errorf("sluice: close producer: %w", err)
	}
	return nil
}

func (p *Producer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// dispatch sends batches as they fill, linger out or come due, until
// Close.
func (p *Producer) dispatch() {
	var calls sync.WaitGroup
	defer func() {
		calls.Wait()
		p.abandon()
		close(p.done)
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		p.mu.Lock()
		batch, next := p.take(time.Now())
		if batch != nil {
			p.inFlight++
		}
		p.mu.Unlock()
		if batch != nil {
			calls.Go(func() { p.send(batch) })
			continue
		}
		if next.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(time.Until(next))
		}
		select {
		case <-p.wake:
		case <-timer.C:
		case <-p.ctx.Done():
			return
		}
	}
}

// take returns the next batch to send at now, if a call slot is free and
// no call is under way or a batch is full, lingered long enough, or
// flushed; otherwise nil and when to look again (zero: when signalled).
func (p *Producer) take(now time.Time) (batch []*pjob, next time.Time) {
	if p.inFlight >= p.cfg.MaxInFlight {
		return nil, time.Time{}
	}
	dueRetries := 0
	for dueRetries < len(p.retries) && !p.retries[dueRetries].due.After(now) {
		dueRetries++
	}
	freshOK := len(p.fresh) > 0 && !now.Before(p.holdUntil)
	if dueRetries == 0 && !freshOK {
		switch {
		case len(p.retries) > 0 && len(p.fresh) > 0:
			return nil, minTime(p.retries[0].due, p.holdUntil)
		case len(p.retries) > 0:
			return nil, p.retries[0].due
		case len(p.fresh) > 0:
			return nil, p.holdUntil
		}
		return nil, time.Time{}
	}
	// Retries first (they hold promised tokens), then fresh jobs, within
	// the batch limits.
	n, size := 0, 0
	fits := func(j *pjob) bool {
		if n > 0 && (n == p.cfg.MaxBatchJobs || size+j.size > p.cfg.MaxBatchBytes) {
			return false
		}
		n, size = n+1, size+j.size
		return true
	}
	nr := 0
	for nr < dueRetries && fits(p.retries[nr]) {
		nr++
	}
	nf := 0
	if freshOK {
		for nf < len(p.fresh) && fits(p.fresh[nf]) {
			nf++
		}
	}
	full := n == p.cfg.MaxBatchJobs || nr < dueRetries || (freshOK && nf < len(p.fresh))
	oldest := now
	if nr > 0 {
		oldest = p.retries[0].due
	}
	if nf > 0 && p.fresh[0].queued.Before(oldest) {
		oldest = p.fresh[0].queued
	}
	lingered := now.Sub(oldest) >= p.cfg.Linger
	flushing := p.flushing()
	// As Nagle's algorithm: with no call under way there is nothing to
	// gather jobs behind, so a batch goes at once; while calls are under
	// way it lingers and the jobs sent meanwhile join it.
	busy := p.inFlight > 0
	if !full && !lingered && !flushing && busy && p.cfg.Linger > 0 {
		return nil, oldest.Add(p.cfg.Linger)
	}
	batch = make([]*pjob, 0, n)
	batch = append(batch, p.retries[:nr]...)
	batch = append(batch, p.fresh[:nf]...)
	for _, j := range p.fresh[:nf] {
		p.freshSize -= j.size
	}
	p.retries = p.retries[nr:]
	// Keep fresh's array: sliced from the front and appended to, it was
	// reallocated and copied as it grew back, about once per batch.
	rest := copy(p.fresh, p.fresh[nf:])
	clear(p.fresh[rest:])
	p.fresh = p.fresh[:rest]
	return batch, time.Time{}
}

// flushing reports whether a Flush or Close waits for jobs.
func (p *Producer) flushing() bool { return len(p.gens) > 1 || p.gens[0].sealed }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// send makes one SubmitBatch call and settles or reschedules its jobs.
func (p *Producer) send(batch []*pjob) {
	req := &ingestv1.SubmitBatchRequest{Jobs: make([]*ingestv1.SubmitRequest, len(batch))}
	for i, j := range batch {
		req.Jobs[i] = j.req
		j.attempts++
	}
	resp, err := p.c.submitBatchOnce(p.ctx, req)
	now := time.Now()
	type outcome struct {
		j     *pjob
		err   error
		id    string
		dup   bool
		retry time.Duration
		again bool
	}
	mismatch := err == nil && len(resp.GetResults()) != len(batch)
	// After a failure of the whole call its jobs retry together, after
	// one wait: the longest any of them is owed. (Taken from the first
	// job alone, a first job out of attempts gave no wait at all, and the
	// others were sent again at once.)
	// The attempts are counted as for each job alone: a refusal with a
	// hint uses up none, so a job whose attempts are used up still waits
	// for the hint (counted from its attempts, it got no wait and the
	// call was sent again at once).
	var callWait time.Duration
	if err != nil {
		callWait = p.c.callRetryWait(p.ctx, err, func(yield func(int) bool) {
			for _, j := range batch {
				if !yield(j.retryAttempt(err)) {
					return
				}
			}
		})
	}
	outs := make([]outcome, len(batch))
	for i, j := range batch {
		o := outcome{j: j}
		switch {
		case err != nil:
			o.err = err
		case mismatch:
			o.err = status.Errorf(codes.Internal, "gateway answered %d results for %d jobs; their outcome is unknown", len(resp.GetResults()), len(batch))
		default:
			r := resp.GetResults()[i]
			if je := r.GetError(); je != nil {
				o.err = fromStatus(jobStatus(je))
			} else {
				o.id, o.dup = r.GetJobId(), r.GetDuplicate()
			}
		}
		if o.err != nil && !mismatch {
			o.retry, o.again = p.c.retryWait(p.ctx, o.err, j.retryAttempt(o.err))
			if err != nil {
				o.retry = callWait
			}
			if hinted(o.err) {
				j.hinted++
			}
		}
		outs[i] = o
	}
	p.mu.Lock()
	p.inFlight--
	var retried []*pjob
	for _, o := range outs {
		if !o.again {
			p.settle(o.j, o.id, o.dup, o.err)
			continue
		}
		o.j.due = now.Add(o.retry)
		retried = append(retried, o.j)
		// Fresh jobs would be refused too: hold them until this one's
		// turn. For UNAVAILABLE that is the backoff.
		if o.j.due.After(p.holdUntil) {
			p.holdUntil = o.j.due
		}
	}
	if len(retried) > 0 {
		p.retries = append(p.retries, retried...)
		slices.SortStableFunc(p.retries, func(a, b *pjob) int { return a.due.Compare(b.due) })
	}
	p.mu.Unlock()
	p.signal()
}

// retryAttempt is the attempt by which the retry of j, failed with err, is
// judged: refusals with a hint (rate, backlog) do not use up attempts,
// neither this one nor j's earlier ones. (Counted with the earlier ones,
// a job refused for rate MaxAttempts times failed at its first
// UNAVAILABLE, with no retry.)
func (j *pjob) retryAttempt(err error) int {
	if hinted(err) {
		return 1
	}
	return j.attempts - j.hinted
}

// hinted reports whether err is a refusal for rate or backlog, which
// comes with a hint of when to retry.
func hinted(err error) bool {
	var quota *QuotaError
	var backlog *BacklogError
	return errors.As(err, &quota) || errors.As(err, &backlog)
}

// settle completes j's future; the caller holds p.mu.
func (p *Producer) settle(j *pjob, id string, dup bool, err error) {
	if err != nil {
		if p.ctx.Err() != nil && !errors.Is(err, ErrProducerClosed) {
			err = fmt.Errorf("%w: %w", ErrProducerClosed, err)
		}
		if j.attempts > 1 {
			err = fmt.Errorf("sluice: producer (gave up after %d attempts): %w", j.attempts, err)
		} else {
			err = fmt.Errorf("sluice: producer: %w", err)
		}
		j.fut.err = &JobError{IdempotencyKey: j.req.GetIdempotencyKey(), Err: err}
	} else {
		j.fut.result = Result{JobID: id, Duplicate: dup, IdempotencyKey: j.req.GetIdempotencyKey(), Attempts: j.attempts}
		j.fut.res = &j.fut.result
	}
	close(j.fut.done)
	if p.pending == p.cfg.MaxPending {
		close(p.room)
		p.room = make(chan struct{})
	}
	p.pending--
	g := j.gen
	g.n--
	if g.n == 0 && g.sealed {
		close(g.done)
		p.gens = slices.DeleteFunc(p.gens, func(x *flushGen) bool { return x == g })
	}
}

// abandon fails the jobs left when Close gave up.
func (p *Producer) abandon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range slices.Concat(p.retries, p.fresh) {
		p.settle(j, "", false, ErrProducerClosed)
	}
	p.retries, p.fresh, p.freshSize = nil, nil, 0
}
