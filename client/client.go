package client

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/ingestcheck"
)

// Defaults for Config fields left zero.
const (
	MaxAttemptsDefault   = 8
	BackoffBaseDefault   = 100 * time.Millisecond
	BackoffMaxDefault    = 5 * time.Second
	MaxRetryWaitDefault  = 30 * time.Second
	MaxBatchBytesDefault = 8 << 20
)

// MaxBatchJobs is the most jobs the gateway accepts in one SubmitBatch
// call.
const MaxBatchJobs = 500

// MaxBatchBytes is the largest encoded SubmitBatch request the gateway
// accepts (gateway.MaxBatchBytes).
const MaxBatchBytes = 16 << 20

// Config configures a Client.
type Config struct {
	// APIKey is the tenant's API key, sent as "authorization: Bearer <key>"
	// on every call. Required.
	APIKey string
	// TLS secures the connection. Nil uses TLS with the system's root CAs,
	// unless Insecure is set. Set RootCAs to trust a private CA and
	// Certificates for mutual TLS; LoadTLS builds such a config from PEM
	// files.
	TLS *tls.Config
	// Insecure sends calls, API key included, in plain text: only for a
	// gateway on loopback or a network you trust. cmd/gateway serves plain
	// text unless started with --tls-cert and --tls-key.
	Insecure bool
	// DialOptions are passed to grpc.NewClient after the client's own, for
	// example grpc.WithStatsHandler(otelgrpc.NewClientHandler()) to send
	// W3C trace context with each call.
	DialOptions []grpc.DialOption
	// MaxAttempts bounds the calls made for one job, the first included.
	// Defaults to 8; 1 turns retries off. With the default backoff the
	// retries after UNAVAILABLE then span 5.6 to 11 s, longer than a
	// gateway with a small store takes to restart (5 attempts spanned 0.75
	// to 1.5 s, and jobs submitted across a restart were refused: found in
	// a walkthrough). Opening an embedded store of millions of jobs takes
	// about 10 s (5 million: 10-14 s): raise MaxAttempts or BackoffMax for
	// such a gateway.
	MaxAttempts int
	// BackoffBase is the wait before the first retry after UNAVAILABLE; it
	// doubles with each attempt up to BackoffMax, and a random half of it
	// is jitter. Default 100ms, and 5s (or BackoffBase, if longer). An
	// UNAVAILABLE that carries a RetryInfo waits at least its delay, up
	// to MaxRetryWait.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxRetryWait is the longest RetryInfo delay the client waits out on
	// its own; a refusal asking for longer is returned at once. Defaults to
	// 30s.
	MaxRetryWait time.Duration
	// AttemptTimeout bounds each call; an attempt that runs out is retried
	// (safe: the job keeps its idempotency key). Zero leaves only the
	// caller's context.
	AttemptTimeout time.Duration
	// MaxBatchJobs is the most jobs per SubmitBatch call. Defaults to, and
	// is capped at, MaxBatchJobs (500).
	MaxBatchJobs int
	// MaxBatchBytes bounds the encoded jobs of one SubmitBatch call.
	// Defaults to 8 MiB, and is capped at MaxBatchBytes (16 MiB, the most
	// the gateway accepts: a bigger call is refused as a whole).
	MaxBatchBytes int
}

func (c Config) withDefaults() Config {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.BackoffBase = cmp.Or(c.BackoffBase, BackoffBaseDefault)
	c.BackoffMax = cmp.Or(c.BackoffMax, max(BackoffMaxDefault, c.BackoffBase))
	c.MaxRetryWait = cmp.Or(c.MaxRetryWait, MaxRetryWaitDefault)
	c.MaxBatchJobs = min(cmp.Or(c.MaxBatchJobs, MaxBatchJobs), MaxBatchJobs)
	c.MaxBatchBytes = min(cmp.Or(c.MaxBatchBytes, MaxBatchBytesDefault), MaxBatchBytes)
	return c
}

// validate names each bad field and what it may be. It never prints the
// config: it printed the whole struct, which named no field (found by a
// tester).
func (c Config) validate() error {
	switch {
	case c.APIKey == "":
		return errors.New("APIKey is required")
	case strings.ContainsAny(c.APIKey, " \t\r\n"):
		return errors.New("APIKey must not contain white space")
	case c.Insecure && c.TLS != nil:
		return errors.New("set TLS or Insecure, not both")
	}
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if c.MaxAttempts < 1 {
		add("MaxAttempts is %d: give 1 or more (0 takes the default, %d)", c.MaxAttempts, MaxAttemptsDefault)
	}
	if c.BackoffBase < 0 {
		add("BackoffBase is %s: it must not be negative (0 takes the default, %s)", c.BackoffBase, BackoffBaseDefault)
	}
	if c.BackoffMax < c.BackoffBase {
		add("BackoffMax is %s, below BackoffBase (%s): give at least BackoffBase (0 takes the default, %s or BackoffBase, if longer)",
			c.BackoffMax, c.BackoffBase, BackoffMaxDefault)
	}
	if c.MaxRetryWait < 0 {
		add("MaxRetryWait is %s: it must not be negative (0 takes the default, %s)", c.MaxRetryWait, MaxRetryWaitDefault)
	}
	if c.AttemptTimeout < 0 {
		add("AttemptTimeout is %s: it must not be negative (0 bounds the calls by the caller's context alone)", c.AttemptTimeout)
	}
	if c.MaxBatchJobs < 1 {
		add("MaxBatchJobs is %d: give 1 to %d (0 takes %d)", c.MaxBatchJobs, MaxBatchJobs, MaxBatchJobs)
	}
	if c.MaxBatchBytes < 1 {
		add("MaxBatchBytes is %d: give 1 to %d (0 takes the default, %d)", c.MaxBatchBytes, MaxBatchBytes, MaxBatchBytesDefault)
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// ErrClientClosed is the error of a call made after Client.Close, or cut
// short by it, and NewProducer's on a closed client. Such calls failed
// with gRPC's CANCELED "the client connection is closing", the code of a
// cancelled context (found by a tester).
var ErrClientClosed = errors.New("sluice: client closed")

// Client submits jobs to a gateway. It is safe for concurrent use.
type Client struct {
	cfg    Config
	conn   *grpc.ClientConn
	rpc    ingestv1.IngestServiceClient
	closed atomic.Bool
}

// New returns a client of the gateway at target (host:port, or any gRPC
// target such as dns:///gateway.internal:7070). It does not connect until
// the first call, but refuses an address it cannot parse.
func New(target string, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sluice client: %w", err)
	}
	transport := insecure.NewCredentials()
	if !cfg.Insecure {
		tc := cfg.TLS
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		transport = credentials.NewTLS(tc)
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(transport),
		grpc.WithPerRPCCredentials(bearer{key: cfg.APIKey, secure: !cfg.Insecure}),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("sluice client: gateway address %q: %w", target, err)
	}
	if err := checkDNSTarget(conn.CanonicalTarget()); err != nil {
		conn.Close()
		return nil, fmt.Errorf("sluice client: gateway address %q: %w (give host:port, or a gRPC target such as dns:///host:port)", target, err)
	}
	return &Client{cfg: cfg, conn: conn, rpc: ingestv1.NewIngestServiceClient(conn)}, nil
}

// checkDNSTarget refuses a target for gRPC's dns resolver (the default
// for a target without a scheme) whose address that resolver cannot
// parse. grpc.NewClient accepts any such target and resolves it only at
// the first call, which then failed UNAVAILABLE ("too many colons in
// address"), and was retried for 10 s (found by a tester). The check is
// the resolver's: host:port, or a host alone, which takes port 443.
func checkDNSTarget(canonical string) error {
	u, err := url.Parse(canonical)
	if err != nil || u.Scheme != "dns" {
		return nil // another resolver's target: it judges its own
	}
	addr := strings.TrimPrefix(cmp.Or(u.Opaque, u.Path), "/")
	_, port, err := net.SplitHostPort(addr)
	switch {
	case err == nil && port == "":
		return fmt.Errorf("no port after the colon in %q", addr)
	case err == nil:
		return nil
	}
	if _, _, err443 := net.SplitHostPort(addr + ":443"); err443 != nil {
		return err
	}
	return nil
}

// Close closes the connection. Calls in progress, and any made later,
// fail with ErrClientClosed. Close a client's producers first. A second
// Close does nothing and returns nil.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.conn.Close()
}

// bearer sends the API key with every call.
type bearer struct {
	key    string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

// RequireTransportSecurity keeps gRPC from sending the key in plain text
// unless Config.Insecure asked for it.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// Job is one job to submit.
type Job struct {
	// Payload is delivered to the worker as is: 1 byte up to the tenant's
	// limit (at most 160 KiB; a bigger one is refused before it is sent).
	Payload []byte
	// Attributes are delivered with the job (at most 16).
	Attributes map[string]string
	// IdempotencyKey makes a repeat of this job within the gateway's
	// window answer the first job's id instead of enqueueing it again. If
	// empty, the client generates one per job and keeps it across its own
	// retries; set it yourself (NewIdempotencyKey, or a natural key such as
	// an order id) to make your own later resubmissions safe too.
	IdempotencyKey string
	// TTL drops the job if it is not delivered this long after it was
	// accepted. Zero means no TTL.
	TTL time.Duration
	// Delay holds the job back this long before its first delivery.
	Delay time.Duration
}

// NewIdempotencyKey returns a unique key, as the client generates for a
// job without one: a random prefix drawn once per process (80 bits) and a
// counter, so that a key costs a counter increment rather than a read of
// the system's random source (which was a tenth of a batching producer's
// CPU). Keys of two processes collide with a chance of 2⁻⁸⁰.
func NewIdempotencyKey() string {
	var buf [32]byte
	return string(strconv.AppendUint(append(buf[:0], keyPrefix()...), keySeq.Add(1), 36))
}

var (
	keySeq    atomic.Uint64
	keyPrefix = sync.OnceValue(func() string { return crand.Text()[:16] + "-" })
)

// checkRequest refuses a request the gateway can never take, as an
// *InvalidArgumentError naming the fields, as the gateway's would: a
// string that is not valid UTF-8, which protobuf cannot encode (proto3
// strings), and which sent would fail the encoding of the whole call,
// every other job of a batch with it; and a payload or job over the
// gateway's hard ceilings, which was sent in full and refused by gRPC
// with a bare RESOURCE_EXHAUSTED, the code of a quota refusal (found by a
// tester). A tenant's own, lower, payload limit is the gateway's to check.
func checkRequest(req *ingestv1.SubmitRequest) error {
	vs := append(ingestcheck.UTF8(req), ingestcheck.Oversize(req)...)
	if len(vs) == 0 {
		return nil
	}
	st := status.New(codes.InvalidArgument, "invalid job: "+vs[0].GetField()+" "+vs[0].GetDescription())
	if ds, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: vs}); err == nil {
		st = ds
	}
	return fromStatus(st)
}

func (j *Job) request() *ingestv1.SubmitRequest {
	req := &ingestv1.SubmitRequest{
		Payload:        j.Payload,
		Attributes:     j.Attributes,
		IdempotencyKey: j.IdempotencyKey,
	}
	if req.IdempotencyKey == "" { // not cmp.Or, which made a key for every job
		req.IdempotencyKey = NewIdempotencyKey()
	}
	if j.TTL != 0 {
		req.Ttl = durationpb.New(j.TTL)
	}
	if j.Delay != 0 {
		req.Delay = durationpb.New(j.Delay)
	}
	return req
}

// Result is the outcome of an accepted job.
type Result struct {
	// JobID is the gateway's id for the job.
	JobID string
	// Duplicate is true when the idempotency key matched an earlier job
	// (possibly this job's own earlier attempt whose answer was lost);
	// JobID is that job's.
	Duplicate bool
	// IdempotencyKey is the key the job was sent with.
	IdempotencyKey string
	// Attempts is the number of calls made for the job.
	Attempts int
}

// Submit sends one job, retrying as the package documentation describes.
// A nil error means the gateway stored the job durably. Every error is a
// *JobError, which carries the job's idempotency key; a refusal in it is
// a *QuotaError, *BacklogError or *InvalidArgumentError (errors.As), and
// any error carries the gRPC status of the last attempt (status.Code(err)).
func (c *Client) Submit(ctx context.Context, job Job) (*Result, error) {
	req := job.request()
	keyed := func(err error) error { return &JobError{IdempotencyKey: req.GetIdempotencyKey(), Err: err} }
	if err := checkRequest(req); err != nil {
		return nil, keyed(fmt.Errorf("sluice: submit: %w", err))
	}
	for attempt := 1; ; attempt++ {
		resp, err := c.submitOnce(ctx, req)
		if err == nil {
			return &Result{JobID: resp.GetJobId(), Duplicate: resp.GetDuplicate(), IdempotencyKey: req.GetIdempotencyKey(), Attempts: attempt}, nil
		}
		wait, retry := c.retryWait(ctx, err, attempt)
		if !retry {
			if attempt > 1 {
				return nil, keyed(fmt.Errorf("sluice: submit (gave up after %d attempts): %w", attempt, err))
			}
			return nil, keyed(fmt.Errorf("sluice: submit: %w", err))
		}
		if werr := sleep(ctx, wait); werr != nil {
			return nil, keyed(fmt.Errorf("sluice: submit: %w while waiting %s to retry after: %w", werr, wait.Round(time.Millisecond), err))
		}
	}
}

func (c *Client) submitOnce(ctx context.Context, req *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
	if c.closed.Load() {
		return nil, ErrClientClosed
	}
	attemptCtx, cancel := c.attemptContext(ctx)
	defer cancel()
	resp, err := c.rpc.Submit(attemptCtx, req)
	if err != nil {
		return nil, c.failed(ctx, attemptCtx, err)
	}
	return resp, nil
}

// failed types err, the failure of a call made with attemptCtx, as
// callError does, and says more where it can: that Close cut the call
// short (ErrClientClosed), or what to change for a TLS mismatch.
func (c *Client) failed(ctx, attemptCtx context.Context, err error) error {
	err = callError(ctx, attemptCtx, err)
	if c.closed.Load() && status.Code(err) == codes.Canceled {
		return fmt.Errorf("%w: %w", ErrClientClosed, err)
	}
	return c.explain(err)
}

// callError types the error of a call made with attemptCtx and, when the
// caller's ctx has ended, wraps ctx.Err() too so that errors.Is(err,
// context.Canceled) works. A DEADLINE_EXCEEDED of an attempt bound by the
// caller's own deadline counts as that deadline even if the answer (the
// server's timer, which gRPC starts from the same deadline) came a moment
// before ctx's.
func callError(ctx, attemptCtx context.Context, err error) error {
	typed := fromStatus(status.Convert(err))
	ctxErr := ctx.Err()
	if ctxErr == nil && status.Code(err) == codes.DeadlineExceeded {
		callerDeadline, ok := ctx.Deadline()
		attemptDeadline, _ := attemptCtx.Deadline()
		if ok && !attemptDeadline.Before(callerDeadline) {
			ctxErr = context.DeadlineExceeded
		}
	}
	if ctxErr != nil {
		return fmt.Errorf("%w: %w", ctxErr, typed)
	}
	return typed
}

func (c *Client) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.cfg.AttemptTimeout > 0 {
		return context.WithTimeout(ctx, c.cfg.AttemptTimeout)
	}
	return ctx, func() {}
}

// retryWait decides whether err, the outcome of attempt, may be retried,
// and after how long. It refuses when the attempts are used up or the wait
// would end after ctx's deadline.
func (c *Client) retryWait(ctx context.Context, err error, attempt int) (time.Duration, bool) {
	if attempt >= c.cfg.MaxAttempts || ctx.Err() != nil ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return 0, false
	}
	var wait time.Duration
	var quota *QuotaError
	var backlog *BacklogError
	switch {
	case errors.As(err, &quota):
		if !quota.hasRetry || quota.RetryAfter > c.cfg.MaxRetryWait {
			return 0, false
		}
		wait = c.hinted(quota.RetryAfter, attempt)
	case errors.As(err, &backlog):
		if !backlog.hasRetry || backlog.RetryAfter > c.cfg.MaxRetryWait {
			return 0, false
		}
		wait = c.hinted(backlog.RetryAfter, attempt)
	case status.Code(err) == codes.Unavailable:
		if _, final := c.connHint(err); final {
			return 0, false // a TLS mismatch: retries cannot heal it
		}
		wait = c.backoff(attempt)
		// The gateway says when its store may take the job again ("job
		// not stored", RetryInfo 1s): retries sooner only find it
		// unavailable again and use up the attempts that were to span
		// its recovery. A hint past MaxRetryWait is capped, not obeyed:
		// UNAVAILABLE is worth retrying whatever it says.
		if hint, ok := retryInfo(err); ok && hint > 0 {
			wait = max(wait, c.hinted(min(hint, c.cfg.MaxRetryWait), attempt))
		}
	case status.Code(err) == codes.DeadlineExceeded && c.cfg.AttemptTimeout > 0:
		// The attempt's own timeout ran out (ctx is live): the job may or
		// may not be stored, and its idempotency key makes a retry safe.
		wait = c.backoff(attempt)
	default:
		return 0, false
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
		return 0, false
	}
	return wait, true
}

// callRetryWait is the one wait before the jobs of a failed call, which
// have made attempts, are sent again: the longest any of them that may
// retry is owed.
func (c *Client) callRetryWait(ctx context.Context, err error, attempts iter.Seq[int]) time.Duration {
	var wait time.Duration
	for a := range attempts {
		if w, ok := c.retryWait(ctx, err, a); ok {
			wait = max(wait, w)
		}
	}
	return wait
}

// hinted honours a RetryInfo delay, adding a little jitter (up to a fifth,
// at most hintJitterMax). The gateway itself tells callers refused together
// distinct times, each a token of its own that it holds for a short grace
// after it is due; the jitter only spreads callers told the same time
// (a gateway past its limit on promises). A hint of zero or less, which
// the gateway never gives, is read as none, and the backoff applies: a
// Producer does not count these refusals as attempts, and a server or
// proxy answering such hints would have it retry in a tight loop.
func (c *Client) hinted(d time.Duration, attempt int) time.Duration {
	if d <= 0 {
		return c.backoff(attempt)
	}
	return d + jitter(min(d/5, hintJitterMax))
}

// retryInfo returns the RetryInfo delay err's status carries, if any.
func retryInfo(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// hintJitterMax bounds the jitter added to a RetryInfo delay: well within
// the gateway's grace for a promised token (250 ms or more).
const hintJitterMax = 5 * time.Millisecond

// backoff is the wait after the attempt-th failure: BackoffBase doubled
// per attempt up to BackoffMax, of which a random half is jitter.
func (c *Client) backoff(attempt int) time.Duration {
	d := c.cfg.BackoffBase
	for i := 1; i < attempt && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.BackoffMax)
	return d/2 + jitter(d/2)
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// sleep waits for d or until ctx ends, returning ctx.Err() in that case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
