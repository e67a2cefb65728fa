package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/envelope"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/ratelog"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/router"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

// IdempotencyWindowDefault is how long an idempotency key is remembered
// when Config.IdempotencyWindow is zero.
const IdempotencyWindowDefault = 10 * time.Minute

// Config configures a Server.
type Config struct {
	// Backend stores accepted jobs. Required.
	Backend queue.Backend
	// Topology names the lanes and their queues. Required.
	Topology topology.Topology
	// Tenants returns the current tenant config; called per request so a
	// reload takes effect at once. Required.
	Tenants func() *tenant.Config
	// Depth supplies queue depths for routing and the high-water mark.
	// Required; the caller starts and stops it.
	Depth *depth.Cache
	// MaxMessageBytes bounds a job's encoded envelope. Defaults to
	// MaxMessageBytesDefault (190 KiB).
	MaxMessageBytes int
	// IdempotencyWindow is how long a key is remembered. Defaults to 10
	// minutes.
	IdempotencyWindow time.Duration
	// DrainRate, when set, reports a lane's measured drain rate in jobs
	// per second at now, and whether one is known (in a single process,
	// metrics.DeliveryRate over the in-process drainers' deliveries). A
	// backlog refusal's retry hint divides the excess backlog by it, or by
	// the lane's declared capacity while none is known. A known rate of 0
	// (nothing delivered while the backlog waits: no workers) gets the
	// hint stalledRetry, and a refusal that says so.
	DrainRate func(lane string, now time.Time) (float64, bool)
	// Metrics records submit outcomes and enqueue latency; nil records
	// nothing.
	Metrics *metrics.Metrics
	// TracerProvider makes the sluice.admit and sluice.enqueue spans of
	// each job. Defaults to the global provider as New finds it: set
	// tracing up (internal/tracing) before New, or no span is made;
	// either way the caller's trace context is stored in the envelope.
	TracerProvider trace.TracerProvider
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now; tests inject a clock.
	Now func() time.Time
}

// Server implements the ingest service.
type Server struct {
	ingestv1.UnimplementedIngestServiceServer

	cfg     Config
	lanes   map[string]*laneQueues
	buckets *Buckets
	idem    *idempotency
	tracer  trace.Tracer
	life    startstop.Runner

	// enqueueFailed bounds the "enqueue failed" lines: with the backend
	// down (a full or read-only disk) every refused call logged one, on
	// what is often the same disk (found by a tester).
	enqueueFailed ratelog.Line
}

type laneQueues struct {
	lane    topology.Lane
	shards  []string
	waiting []string // every queue whose messages count toward the lane backlog
}

// New validates cfg and returns a server. Call Start to run its janitor.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil || cfg.Tenants == nil || cfg.Depth == nil {
		return nil, errors.New("gateway: Backend, Tenants and Depth are required")
	}
	if err := cfg.Topology.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: topology: %w", err)
	}
	cfg.IdempotencyWindow = cmp.Or(cfg.IdempotencyWindow, IdempotencyWindowDefault)
	cfg.MaxMessageBytes = cmp.Or(cfg.MaxMessageBytes, MaxMessageBytesDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{
		cfg: cfg, lanes: map[string]*laneQueues{}, buckets: NewBuckets(), idem: newIdempotency(cfg.IdempotencyWindow, cfg.Backend),
		tracer: tracing.Tracer(cfg.TracerProvider), enqueueFailed: ratelog.Line{Now: cfg.Now},
	}
	for _, l := range cfg.Topology.Lanes {
		lq := &laneQueues{lane: l}
		for i := range l.Shards {
			lq.shards = append(lq.shards, cfg.Topology.ShardQueue(l.Name, i))
		}
		lq.waiting = append(append(lq.waiting, lq.shards...), cfg.Topology.SpilloverQueue(l.Name), cfg.Topology.BacklogQueue(l.Name))
		for i := l.Shards; i < l.Shards+l.RetiredShards; i++ { // jobs left in shards the lane no longer has
			lq.waiting = append(lq.waiting, cfg.Topology.ShardQueue(l.Name, i))
		}
		s.lanes[l.Name] = lq
	}
	return s, nil
}

// Start runs a janitor that evicts idle token buckets and expired
// idempotency keys until Stop (see internal/startstop).
func (s *Server) Start(ctx context.Context) error {
	return s.life.Start(ctx, func(ctx context.Context) {
		periodic.Every(ctx, time.Minute, func(context.Context) {
			now := s.cfg.Now()
			s.buckets.Sweep(now)
			s.idem.sweep(now)
		})
	})
}

// Stop ends the janitor, waiting for it until ctx ends. Idempotent; safe
// without Start.
func (s *Server) Stop(ctx context.Context) error {
	if err := s.life.Stop(ctx); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	return nil
}

// Submit admits and enqueues one job.
func (s *Server) Submit(ctx context.Context, req *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
	t, ok := TenantFrom(ctx)
	if !ok {
		return nil, errMissingKey
	}
	b := s.newBatch(ctx, t, 1)
	b.claimKeys(req)
	b.admit(req, -1)
	b.enqueue()
	r := b.results[0]
	if r.err != nil {
		return nil, r.status().Err()
	}
	return &ingestv1.SubmitResponse{JobId: r.jobID, Duplicate: r.duplicate}, nil
}

// SubmitBatch admits and enqueues each job on its own.
func (s *Server) SubmitBatch(ctx context.Context, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
	t, ok := TenantFrom(ctx)
	if !ok {
		return nil, errMissingKey
	}
	if v := validateBatch(req); len(v) > 0 {
		// Refused as a whole, before its jobs are read: counted once, as
		// a call refused for its key is.
		s.cfg.Metrics.SubmitN(t.ID, t.Tier, t.Limits.Lane, metrics.OutcomeInvalid, 1)
		return nil, invalidArgument(v)
	}
	b := s.newBatch(ctx, t, len(req.GetJobs()))
	b.claimKeys(req.GetJobs()...)
	for i, job := range req.GetJobs() {
		b.admit(job, i)
	}
	b.enqueue()
	resp := &ingestv1.SubmitBatchResponse{Results: make([]*ingestv1.SubmitBatchResult, len(b.results))}
	outs := make([]ingestv1.SubmitBatchResult, len(b.results)) // one allocation for the results
	for i, r := range b.results {
		out := &outs[i]
		if r.err != nil {
			out.Error = r.jobError()
		} else {
			out.JobId, out.Duplicate = r.jobID, r.duplicate
		}
		resp.Results[i] = out
	}
	return resp, nil
}

// batch carries the jobs of one call through admission and enqueue.
type batch struct {
	s   *Server
	ctx context.Context
	// traceCtx is ctx with the caller's trace context (from the call's
	// metadata): the parent of each job's spans.
	traceCtx context.Context
	tenant   *tenant.Tenant
	lane     *laneQueues
	now      time.Time
	results  []*result
	// backlog is the lane's backlog, read once per call (-1: not yet):
	// the jobs of one call are admitted against the same depths.
	backlog int64
	// outcomes counts the call's jobs per metrics outcome, recorded once
	// per outcome.
	outcomes []outcomeCount
	// shard is the shard the call's jobs go to (-1: not picked yet).
	shard int
	// acceptedAt is now as the envelopes carry it (nil: not made yet).
	acceptedAt *timestamppb.Timestamp
	// bodies holds the encoded envelopes of the call.
	bodies []byte
	// env is the envelope of the job being prepared: one for the call,
	// as encoding only reads it.
	env envelope.Envelope
	// entryBuf and keyBuf hold the send entries and stored keys not yet
	// used (entries).
	entryBuf []queue.SendEntry
	keyBuf   []queue.StoredKey
	// jobIDs holds the job ids made for the call and not yet used
	// (nextJobID).
	jobIDs string
	// claims are the call's idempotency keys, claimed before admission,
	// sorted by key; claimed is closed once they are settled.
	claims  []keyClaim
	claimed chan struct{}
	// overRate and overBacklog are the call's refusal, made for its first
	// job refused so (the same for every job of the call).
	overRate, overBacklog *quotaRefusal
}

// quotaRefusal is what a RESOURCE_EXHAUSTED refusal names and says.
type quotaRefusal struct{ subject, description string }

type outcomeCount struct {
	outcome string
	n       int
}

func (b *batch) count(outcome string) {
	for i := range b.outcomes {
		if b.outcomes[i].outcome == outcome {
			b.outcomes[i].n++
			return
		}
	}
	b.outcomes = append(b.outcomes, outcomeCount{outcome, 1})
}

type result struct {
	jobID     string
	duplicate bool
	err       *status.Status
	outcome   string // for metrics; set when refused, else decided after enqueue
	// A quota refusal (refuseQuota): what it names ("rate:acme") and when
	// to retry; its status gets the details only when sent whole
	// (status).
	quotaSubject string
	retry        time.Duration

	// Set for a job admitted and waiting to be sent.
	queue  string
	body   []byte
	delay  time.Duration
	token  Token      // given back if the send fails
	idem   *idemEntry // finished once the outcome is known
	copyOf *result    // a repeat of an idempotency key earlier in this batch

	enqueueSpan trace.Span // from prepare until the send settles
}

// refuseQuota refuses r with RESOURCE_EXHAUSTED as q says, to be retried
// after retry.
func (r *result) refuseQuota(q *quotaRefusal, retry time.Duration) {
	r.err = status.New(codes.ResourceExhausted, q.description)
	r.quotaSubject, r.retry = q.subject, retry
}

// status is r's refusal as a unary call returns it, with its details.
func (r *result) status() *status.Status {
	if r.quotaSubject == "" {
		return r.err
	}
	return quotaDetails(r.err, r.quotaSubject, r.retry)
}

// newBatch starts a call of n jobs.
func (s *Server) newBatch(ctx context.Context, t *tenant.Tenant, n int) *batch {
	b := &batch{s: s, ctx: ctx, traceCtx: tracing.FromIncoming(ctx), tenant: t, lane: s.lanes[t.Limits.Lane], now: s.cfg.Now(), backlog: -1, shard: -1}
	// One allocation for the results of the call.
	rs := make([]result, n)
	b.results = make([]*result, n)
	for i := range rs {
		b.results[i] = &rs[i]
	}
	b.results = b.results[:0]
	return b
}

// Span start options, made once: each option is an allocation.
var (
	admitSpanOpts   = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	enqueueSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// admit runs every check of the index-th job of the call (-1 for a unary
// Submit) and, if it passes, prepares its message. It appends exactly one
// result.
func (b *batch) admit(req *ingestv1.SubmitRequest, index int) {
	b.results = b.results[:len(b.results)+1]
	r := b.results[len(b.results)-1]
	lim := b.tenant.Limits
	spanCtx, span := b.s.tracer.Start(b.traceCtx, tracing.SpanAdmit, admitSpanOpts...)
	defer endAdmit(span, b, r)
	if v := validateJob(req, lim.MaxPayloadBytes, ""); len(v) > 0 {
		if index >= 0 { // name the job's fields within the batch
			v = validateJob(req, lim.MaxPayloadBytes, fieldPrefix(index))
		}
		r.err, r.outcome = badRequest(v), metrics.OutcomeInvalid
		return
	}
	if b.lane == nil {
		r.err = status.Newf(codes.FailedPrecondition, "tenant %q is configured for lane %q, which this gateway's topology does not have", b.tenant.ID, lim.Lane)
		r.outcome = metrics.OutcomeInvalid
		return
	}
	// The envelope carries the payload and attributes whole: a job whose
	// envelope cannot fit the message limit is bad input, refused before
	// the token and the high-water mark can answer RESOURCE_EXHAUSTED,
	// whose retry would never help. Near the limit its size is computed
	// but for the trace context, known only once admitted; the exact size
	// is checked once the envelope is encoded (prepare).
	if n := b.sizeAtLeast(req); n > b.s.cfg.MaxMessageBytes {
		b.refuseTooLarge(r, n, index)
		return
	}
	if key := req.GetIdempotencyKey(); key != "" {
		c := b.claimOf(key)
		switch {
		case c.err != nil:
			r.err = beginError(c.err)
			return
		case c.firstID != "":
			r.jobID, r.duplicate = c.firstID, true
			return
		case c.holder != nil:
			r.copyOf = c.holder
			return
		}
		r.idem, c.holder = c.entry, r
	}
	token, wait, ok := b.s.buckets.Take(b.tenant.ID, rate.Limit(lim.SubmitRate), lim.SubmitBurst, b.now)
	if !ok {
		r.outcome = metrics.OutcomeThrottledRate
		if b.overRate == nil {
			b.overRate = &quotaRefusal{"rate:" + b.tenant.ID, fmt.Sprintf("tenant %s is over its submit rate of %g jobs/s (burst %d)", b.tenant.ID, lim.SubmitRate, lim.SubmitBurst)}
		}
		r.refuseQuota(b.overRate, wait)
		return
	}
	backlog := b.laneBacklog()
	drainRate := b.drainRate()
	if refused, retry := hwmVerdict(backlog, b.lane.lane.HighWaterMark, lim.HWMFraction, drainRate); refused {
		token.Return(b.now)
		r.outcome = metrics.OutcomeThrottledBacklog
		if b.overBacklog == nil {
			why := fmt.Sprintf("lane %s backlog of %d jobs is at the %s tier's limit (%.0f%% of %d)", b.lane.lane.Name, backlog, b.tenant.Tier, lim.HWMFraction*100, b.lane.lane.HighWaterMark)
			if drainRate == 0 {
				why += fmt.Sprintf("; nothing was delivered from the lane in the last %s: are its workers connected?", metrics.RateWindowDefault)
			}
			b.overBacklog = &quotaRefusal{"lane_backlog:" + b.tenant.ID, why}
		}
		r.refuseQuota(b.overBacklog, retry)
		return
	}
	r.token = token
	b.prepare(spanCtx, r, req, index)
}

// fieldPrefix names the index-th job of a SubmitBatch in a field
// violation ("jobs[3]."), or nothing for a unary Submit (-1).
func fieldPrefix(index int) string {
	if index < 0 {
		return ""
	}
	return "jobs[" + strconv.Itoa(index) + "]."
}

// drainRate is the lane's measured drain rate where one is known (0 when
// nothing was delivered), else its declared capacity.
func (b *batch) drainRate() float64 {
	if f := b.s.cfg.DrainRate; f != nil {
		if r, ok := f(b.lane.lane.Name, b.now); ok {
			return r
		}
	}
	return b.lane.lane.Capacity
}

// claimKeys claims the call's idempotency keys before any of its jobs is
// admitted: each distinct key once, in sorted order (idempotency.claim:
// claimed in request order, [k1, k2] against [k2, k1] waited for each
// other, each holding one key until its call ended). Every claim is
// settled once the call's outcome is known (enqueue).
func (b *batch) claimKeys(reqs ...*ingestv1.SubmitRequest) {
	var keys []string
	for _, req := range reqs {
		if k := req.GetIdempotencyKey(); k != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	b.claims = make([]keyClaim, len(keys))
	for i, k := range keys {
		b.claims[i].key = k
	}
	b.claimed = b.s.idem.claim(b.ctx, b.tenant.ID, b.claims, b.now)
}

// claimOf is the call's claim on key, which claimKeys claimed.
func (b *batch) claimOf(key string) *keyClaim {
	i, _ := slices.BinarySearchFunc(b.claims, key, func(c keyClaim, key string) int { return strings.Compare(c.key, key) })
	return &b.claims[i]
}

// pickShard is the shard the call's jobs go to, picked for its first job:
// the least deep of the tenant's shard set. The depths are not updated
// until the call's jobs are sent, so every job of a call picked the same
// shard already, each hashing the tenant and reading the depths again.
func (b *batch) pickShard() int {
	if b.shard < 0 {
		l := b.lane.lane
		b.shard = router.Pick(b.tenant.ID, l.Name, l.Shards, l.ShardChoices, func(i int) int64 {
			return b.s.cfg.Depth.Waiting(b.lane.shards[i])
		})
	}
	return b.shard
}

// nextJobID returns a new job id. The first job of the call to need one
// makes those of every job left (newJobIDs): a job refused after it
// leaves its id unused.
func (b *batch) nextJobID() string {
	if b.jobIDs == "" {
		b.jobIDs = newJobIDs(cap(b.results) - len(b.results) + 1) // this job and those after it
	}
	id := b.jobIDs[:ulid.EncodedSize]
	b.jobIDs = b.jobIDs[ulid.EncodedSize:]
	return id
}

// enqueuedAt is the call's acceptance time, shared by its envelopes
// (encoding only reads it).
func (b *batch) enqueuedAt() *timestamppb.Timestamp {
	if b.acceptedAt == nil {
		b.acceptedAt = timestamppb.New(b.now)
	}
	return b.acceptedAt
}

// bodyChunk bounds a buffer of a call's encoded envelopes (encode).
const bodyChunk = 64 << 10

// encode encodes env, whose envelope is about hint bytes, after the
// call's bodies encoded so far and returns it: the bodies of a call share
// buffers of up to bodyChunk (the backend copies a body before Send
// returns), each capped so that none can grow into the next. A body that
// does not fit has an array of its own.
func (b *batch) encode(env *envelope.Envelope, hint int) ([]byte, error) {
	if cap(b.bodies)-len(b.bodies) < hint && hint < bodyChunk/4 {
		left := cap(b.results) - len(b.results) + 1 // this job and those after it
		b.bodies = make([]byte, 0, min(bodyChunk, left*hint))
	}
	free := b.bodies[len(b.bodies):]
	out, err := envelope.Append(free, env)
	if err != nil {
		return nil, err
	}
	if len(out) <= cap(free) { // appended in place
		b.bodies = b.bodies[:len(b.bodies)+len(out)]
	}
	return out[:len(out):len(out)], nil
}

// envelopeOverhead is about what an envelope adds to the payload,
// attributes and idempotency key it carries: the ids, names and times.
const envelopeOverhead = 128

func (b *batch) laneBacklog() int64 {
	if b.backlog >= 0 {
		return b.backlog
	}
	var n int64
	for _, q := range b.lane.waiting {
		n += b.s.cfg.Depth.Pending(q)
	}
	b.backlog = n
	return n
}

// prepare routes the index-th job of the call (-1 for a unary Submit) and
// encodes its envelope. admitCtx carries the job's sluice.admit span.
func (b *batch) prepare(admitCtx context.Context, r *result, req *ingestv1.SubmitRequest, index int) {
	l := b.lane.lane
	shard := b.pickShard()
	jobID := b.nextJobID()
	// The envelope carries the enqueue span's context (the caller's when
	// tracing is off), so the drainers' spans continue this trace.
	spanCtx, span := b.s.tracer.Start(admitCtx, tracing.SpanEnqueue, enqueueSpanOpts...)
	if span.IsRecording() {
		span.SetAttributes(tracing.JobAttributes(jobID, b.tenant.ID, l.Name)...)
		span.SetAttributes(tracing.QueueKey.String(b.lane.shards[shard]))
	}
	r.enqueueSpan = span
	env := &b.env
	*env = envelope.Envelope{
		JobId:          jobID,
		Tenant:         b.tenant.ID,
		Lane:           l.Name,
		Payload:        req.GetPayload(),
		Attributes:     req.GetAttributes(),
		EnqueuedAt:     b.enqueuedAt(),
		IdempotencyKey: req.GetIdempotencyKey(),
		TraceContext:   tracing.Inject(spanCtx),
		Shard:          uint32(shard),
	}
	if ttl := req.GetTtl(); ttl != nil {
		env.ExpiresAt = timestamppb.New(b.now.Add(ttl.AsDuration()))
	}
	body, err := b.encode(env, carriedBytes(req)+len(env.GetIdempotencyKey())+envelopeOverhead)
	if err != nil {
		r.token.Return(b.s.cfg.Now())
		r.token = Token{}
		r.err = status.Newf(codes.Internal, "encode job: %v", err)
		endEnqueue(r, r.err.Err())
		return
	}
	if len(body) > b.s.cfg.MaxMessageBytes {
		b.refuseTooLarge(r, len(body), index)
		endEnqueue(r, r.err.Err())
		return
	}
	r.jobID, r.queue, r.body, r.delay = env.JobId, b.lane.shards[shard], body, req.GetDelay().AsDuration()
}

// enqueue sends every prepared job, grouped by queue in batches of up to
// queue.MaxBatch, and settles each result. A backend that is a
// queue.MultiSender gets all the batches in one call (one commit);
// others get one Send each, up to 8 at once.
func (b *batch) enqueue() {
	type chunk struct {
		queue string
		rs    []*result
	}
	var groups []chunk // few: a lane's shards
	for _, r := range b.results {
		if r.body == nil {
			continue
		}
		k := slices.IndexFunc(groups, func(g chunk) bool { return g.queue == r.queue })
		if k < 0 {
			k = len(groups)
			groups = append(groups, chunk{queue: r.queue})
		}
		groups[k].rs = append(groups[k].rs, r)
	}
	var chunks []chunk
	for _, g := range groups {
		for start := 0; start < len(g.rs); start += queue.MaxBatch {
			chunks = append(chunks, chunk{g.queue, g.rs[start:min(start+queue.MaxBatch, len(g.rs))]})
		}
	}
	multi, isMulti := b.s.cfg.Backend.(queue.MultiSender)
	switch {
	case len(chunks) == 1: // a unary Submit, or a small batch bound for one queue: no goroutine
		b.send(chunks[0].queue, chunks[0].rs, b.entries(chunks[0].rs))
	case len(chunks) > 1 && isMulti:
		sends := make([]*queue.SendParams, len(chunks))
		params := make([]queue.SendParams, len(chunks))
		for i, c := range chunks {
			params[i] = queue.SendParams{Queue: c.queue, Entries: b.entries(c.rs)}
			sends[i] = &params[i]
		}
		start := time.Now()
		outs, errs := multi.SendMany(b.ctx, sends)
		took := time.Since(start)
		for i, c := range chunks {
			b.settle(c.queue, c.rs, outs[i], errs[i], took)
		}
	case len(chunks) > 1:
		entries := make([][]queue.SendEntry, len(chunks))
		for i, c := range chunks { // before the goroutines: entries carves the call's arrays
			entries[i] = b.entries(c.rs)
		}
		var g errgroup.Group
		g.SetLimit(8)
		for i, c := range chunks {
			g.Go(func() error { b.send(c.queue, c.rs, entries[i]); return nil })
		}
		_ = g.Wait() // send records failures per result
	}
	b.settleKeys()
	for _, r := range b.results {
		if r.copyOf != nil {
			r.jobID, r.duplicate, r.err = r.copyOf.jobID, r.copyOf.err == nil, r.copyOf.err
			r.quotaSubject, r.retry = r.copyOf.quotaSubject, r.copyOf.retry
			if r.err != nil { // refused as its first was, and counted so
				r.outcome = r.copyOf.outcome
			}
		}
		b.count(r.finalOutcome())
	}
	for _, c := range b.outcomes {
		b.s.cfg.Metrics.SubmitN(b.tenant.ID, b.tenant.Tier, b.tenant.Limits.Lane, c.outcome, c.n)
	}
}

// settleKeys settles the call's claims once its sends have settled,
// under one lock, and wakes the calls waiting for them: a claim's job id
// if its job was stored, else none (the key is free again).
func (b *batch) settleKeys() {
	if b.claimed == nil {
		return
	}
	idem, now := b.s.idem, b.s.cfg.Now()
	idem.mu.Lock()
	for i := range b.claims {
		c := &b.claims[i]
		if c.entry == nil {
			continue
		}
		id := ""
		if r := c.holder; r != nil && r.err == nil { // else refused, or its jobs were refused before taking it
			id = r.jobID
		}
		idem.settle(c.entry, id, now)
	}
	idem.mu.Unlock()
	close(b.claimed)
}

// finalOutcome is the metrics outcome of a settled result.
func (r *result) finalOutcome() string {
	switch {
	case r.outcome != "":
		return r.outcome
	case r.duplicate:
		return metrics.OutcomeDuplicate
	case r.err == nil:
		return metrics.OutcomeAdmitted
	case r.err.Code() == codes.InvalidArgument:
		return metrics.OutcomeInvalid
	case r.err.Code() == codes.Canceled || r.err.Code() == codes.DeadlineExceeded:
		return metrics.OutcomeCanceled // the caller's context ended (beginError, settle)
	}
	return metrics.OutcomeUnavailable
}

// send stores rs, whose messages are entries, in queue q with one Send
// and settles them.
func (b *batch) send(q string, rs []*result, entries []queue.SendEntry) {
	start := time.Now()
	out, err := b.s.cfg.Backend.Send(b.ctx, &queue.SendParams{Queue: q, Entries: entries})
	b.settle(q, rs, out, err, time.Since(start))
}

// entries are the messages of rs, in order, with their idempotency keys.
// They and the keys are carved from arrays made once for the call.
func (b *batch) entries(rs []*result) []queue.SendEntry {
	if len(b.entryBuf) < len(rs) {
		n := 0
		for _, r := range b.results {
			if r.body != nil {
				n++
			}
		}
		b.entryBuf = make([]queue.SendEntry, max(n, len(rs)))
	}
	entries := b.entryBuf[:len(rs):len(rs)]
	b.entryBuf = b.entryBuf[len(rs):]
	for i, r := range rs {
		entries[i] = queue.SendEntry{ID: strconv.Itoa(i), Body: r.body, Delay: r.delay, GroupID: b.tenant.ID, Key: b.storedKey(r)}
	}
	return entries
}

// storedKey is the key to store with r's job, or nil (see
// idempotency.stored).
func (b *batch) storedKey(r *result) *queue.StoredKey {
	if r.idem == nil || b.s.idem.store == nil {
		return nil
	}
	if len(b.keyBuf) == 0 {
		b.keyBuf = make([]queue.StoredKey, len(b.claims))
	}
	k := &b.keyBuf[0]
	b.keyBuf = b.keyBuf[1:]
	*k = b.s.idem.storedKey(r.idem, r.jobID, b.now)
	return k
}

// settle records the outcome of the send of rs to q, which took took:
// out has the entries' results, err the whole send's failure. A failed
// send is logged once, with the first error of its jobs.
func (b *batch) settle(q string, rs []*result, out []queue.SendResult, err error, took time.Duration) {
	b.s.cfg.Metrics.EnqueueLatency(b.lane.lane.Name, took)
	sent := 0
	var firstErr error
	for i, r := range rs {
		var entryErr error
		switch {
		case err != nil:
			entryErr = err
		case i < len(out) && out[i].Err != nil:
			entryErr = out[i].Err
		case i >= len(out):
			entryErr = errors.New("backend returned no result")
		}
		endEnqueue(r, entryErr)
		if entryErr != nil {
			r.token.Return(b.s.cfg.Now())
			if ctxErr := b.ctx.Err(); ctxErr != nil && errors.Is(entryErr, ctxErr) {
				// The caller left (its deadline, or a cancel) before the
				// job was stored: not a backend failure, nothing to log.
				r.err = status.FromContextError(ctxErr)
				continue
			}
			r.err = unavailable(entryErr)
			if firstErr == nil {
				firstErr = entryErr
			}
			continue
		}
		sent++
	}
	if firstErr != nil {
		b.s.enqueueFailed.Do(func(skipped int64) {
			b.s.cfg.Logger.WarnContext(b.ctx, "enqueue failed", slog.String("tenant", b.tenant.ID), slog.String("queue", q),
				slog.Int("failed_jobs", len(rs)-sent), slog.Int("jobs", len(rs)), slog.Any("error", firstErr), ratelog.Suppressed(skipped))
		})
	}
	b.s.cfg.Depth.Add(q, int64(sent))
}

// sizeAtLeast is a lower bound of req's envelope size: its payload and
// attributes, and near the message limit (within nearLimitBytes) the
// size of its envelope but for the trace context, so that a job the
// envelope's own fields push over the limit is refused before admission
// like a larger one (it used to be found after, once encoded).
func (b *batch) sizeAtLeast(req *ingestv1.SubmitRequest) int {
	n := carriedBytes(req)
	if n+nearLimitBytes <= b.s.cfg.MaxMessageBytes {
		return n
	}
	env := &envelope.Envelope{
		JobId:          jobIDLength,
		Tenant:         b.tenant.ID,
		Lane:           b.lane.lane.Name,
		Payload:        req.GetPayload(),
		Attributes:     req.GetAttributes(),
		EnqueuedAt:     b.enqueuedAt(),
		IdempotencyKey: req.GetIdempotencyKey(),
	}
	if ttl := req.GetTtl(); ttl != nil {
		env.ExpiresAt = timestamppb.New(b.now.Add(ttl.AsDuration()))
	}
	return proto.Size(env)
}

// nearLimitBytes is how close to the message limit a job's payload and
// attributes must come for sizeAtLeast to size its envelope: well over
// what the rest adds (a 128-byte idempotency key, ids, names, times, the
// trace context and the framing of 16 attributes: about 1 KiB at most).
const nearLimitBytes = 8 << 10

// jobIDLength stands for a job id (a ULID) in sizeAtLeast.
var jobIDLength = strings.Repeat("0", ulid.EncodedSize)

// carriedBytes is a lower bound of req's envelope size: its payload and
// attributes, which the envelope carries whole.
func carriedBytes(req *ingestv1.SubmitRequest) int {
	n := len(req.GetPayload())
	for k, v := range req.GetAttributes() {
		n += len(k) + len(v)
	}
	return n
}

// refuseTooLarge refuses the index-th job of the call (-1 for a unary
// Submit), whose envelope exceeds the message limit, giving back its
// token. Within a batch the violation names the job's payload as
// validation does ("jobs[3].payload"); it said "payload", which names no
// job of a batch.
func (b *batch) refuseTooLarge(r *result, n, index int) {
	r.token.Return(b.s.cfg.Now())
	r.token = Token{}
	r.err = badRequest(violations{{Field: fieldPrefix(index) + "payload", Description: fmt.Sprintf(
		"with its attributes and envelope the job is at least %d bytes, over the message limit of %d (SQS's 256 KiB after base64): shrink the payload or the attributes", n, b.s.cfg.MaxMessageBytes)}})
	r.outcome = metrics.OutcomeInvalid
}

// endAdmit ends a job's sluice.admit span with the admission's outcome.
// An in-batch repeat of a key is admitted as its first was: refused with
// its refusal, or else a duplicate of its job (whose send has yet to
// settle: that is the first's sluice.enqueue span).
func endAdmit(span trace.Span, b *batch, r *result) {
	if span.IsRecording() {
		a := r
		if r.copyOf != nil {
			a = r.copyOf
		}
		outcome := a.outcome
		switch {
		case a.err != nil:
			outcome = cmp.Or(outcome, a.err.Code().String())
			span.SetStatus(otelcodes.Error, a.err.Message())
		case r.duplicate || r.copyOf != nil:
			outcome = metrics.OutcomeDuplicate
		default:
			outcome = metrics.OutcomeAdmitted
		}
		span.SetAttributes(tracing.TenantKey.String(b.tenant.ID), tracing.LaneKey.String(b.tenant.Limits.Lane), tracing.OutcomeKey.String(outcome))
		if a.err == nil && a.jobID != "" { // a refused job has none
			span.SetAttributes(tracing.JobIDKey.String(a.jobID))
		}
	}
	span.End()
}

// endEnqueue ends a job's sluice.enqueue span once its send settled.
func endEnqueue(r *result, err error) {
	if r.enqueueSpan == nil {
		return
	}
	if err != nil {
		tracing.Fail(r.enqueueSpan, err)
	}
	r.enqueueSpan.End()
	r.enqueueSpan = nil
}
