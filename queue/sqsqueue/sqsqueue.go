package sqsqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sluice-dev/sluice/internal/ratelog"
	"github.com/sluice-dev/sluice/queue"
)

// ErrNoRegion is New's error when neither Config.Region nor the
// environment or shared config names an AWS region.
var ErrNoRegion = errors.New("sqsqueue: no AWS region: set Config.Region or AWS_REGION")

// Defaults for Config fields left zero.
const (
	// LingerDefault is how long Send waits for concurrent Sends to the same
	// queue to fill a SendMessageBatch.
	LingerDefault = 3 * time.Millisecond
	// DeleteLingerDefault is how long Delete waits for concurrent Deletes
	// from the same queue to fill a DeleteMessageBatch. The drainer acks
	// after the worker's slot is freed, so this costs no worker time and
	// no dwell; a drainer killed meanwhile leaves those jobs to be
	// delivered again. In the bench's cost scenario (500 jobs/s over 10
	// tenants) 20 ms gave 0.348 DeleteMessageBatch calls per job.
	DeleteLingerDefault = 50 * time.Millisecond
	// MaxAttemptsDefault is the SDK's attempts per API call, the first
	// included.
	MaxAttemptsDefault = 3
	// MaxBackoffDefault caps the SDK's jittered exponential backoff between
	// attempts.
	MaxBackoffDefault = time.Second
	// CallTimeoutDefault bounds one API call, all its attempts and backoffs
	// included. A long-polling ReceiveMessage gets its wait on top.
	CallTimeoutDefault = 10 * time.Second
	// FenceVisibility is the least visibility timeout a fenced Delete sets
	// while it checks the leases, just before it deletes: if the delete
	// then fails, the message comes back this long after. It is longer
	// (two CallTimeouts plus DeleteLinger) when those could let the delete
	// land after it ran out.
	FenceVisibility = 30 * time.Second
	// StatsConcurrencyDefault is how many GetQueueAttributes calls one Stats
	// call runs at once.
	StatsConcurrencyDefault = 8
)

// Size limits of SQS that the backend enforces before calling it.
const (
	// MaxEncodedBodyBytes is the largest message SQS takes in this backend:
	// 256 KiB of base64 text. SQS counts the encoded body, so the largest raw
	// body that fits is MaxRawBodyBytes, less than queue.MaxBodyBytes.
	MaxEncodedBodyBytes = 256 * 1024
	// MaxRawBodyBytes is the largest raw body whose base64 encoding fits in
	// MaxEncodedBodyBytes (196,608 bytes).
	MaxRawBodyBytes = MaxEncodedBodyBytes / 4 * 3
	// MaxBatchPayloadBytes bounds the sum of the encoded bodies in one
	// SendMessageBatch. AWS raised the per-request limit to 1 MiB in 2025;
	// 256 KiB is accepted by every SQS and emulator version.
	MaxBatchPayloadBytes = 256 * 1024
)

// Config configures a Backend. The zero value of each field means its
// default, stated in its comment.
type Config struct {
	// Client is the SQS client to use. When nil, New builds one from the
	// fields below and the standard AWS configuration sources (environment,
	// shared config files, instance role). When set, Endpoint, Region,
	// Credentials, MaxAttempts and MaxBackoff are ignored: the client's own
	// settings apply.
	Client *sqs.Client

	// Endpoint is the SQS endpoint URL, such as http://127.0.0.1:4566 for a
	// local server. Defaults to AWS's endpoint for Region (or
	// AWS_ENDPOINT_URL_SQS). Every request goes to it: queue URLs are sent
	// in request bodies only, never dialled, so a local server's queue URLs
	// whose host does not resolve work.
	Endpoint string
	// Region is the AWS region. Defaults to the standard sources
	// (AWS_REGION, the shared config file); New fails if none has one.
	Region string
	// Credentials signs requests. Defaults to the SDK's default chain.
	Credentials aws.CredentialsProvider
	// MaxAttempts is the number of attempts of each API call made by the
	// SDK's standard retryer (throttling, 5xx and network errors are
	// retried). Defaults to MaxAttemptsDefault (3). 1 disables retries.
	MaxAttempts int
	// MaxBackoff caps the backoff between attempts. Defaults to
	// MaxBackoffDefault (1 s).
	MaxBackoff time.Duration

	// CallTimeout bounds each API call including its retries; ReceiveMessage
	// gets its long-poll wait on top. Defaults to CallTimeoutDefault (10 s).
	CallTimeout time.Duration

	// QueueURLs maps queue names to queue URLs (as Terraform outputs them).
	// Names missing here are resolved with GetQueueUrl on first use and
	// cached. Defaults to empty.
	QueueURLs map[string]string

	// Linger is how long the first Send entry for a queue waits for more
	// entries before a SendMessageBatch goes out; a batch also goes out as
	// soon as it has queue.MaxBatch entries or MaxBatchPayloadBytes of
	// bodies. Defaults to LingerDefault (3 ms). Negative disables lingering:
	// each Send call is sent at once as its own batch.
	Linger time.Duration

	// DeleteLinger is Linger for Delete: how long the first handle to
	// delete from a queue waits for others to share its DeleteMessageBatch.
	// An ack's latency delays nothing but the message's removal, so it can
	// wait longer than a Send. Defaults to DeleteLingerDefault (50 ms);
	// negative sends each Delete call at once.
	DeleteLinger time.Duration

	// SkipDeleteFencing makes Delete one DeleteMessageBatch call, without
	// first checking the leases with ChangeMessageVisibilityBatch. That
	// saves an API call per Delete, but a stale receipt handle then reports
	// success (SQS does not fence deletes) instead of ErrReceiptInvalid.
	// Defaults to false: deletes are fenced, as the queue contract says.
	SkipDeleteFencing bool

	// StatsConcurrency is the number of GetQueueAttributes calls a Stats call
	// makes at once. Defaults to StatsConcurrencyDefault (8).
	StatsConcurrency int

	// Logger receives warnings (undecodable message bodies) and, for a
	// client New builds, the SDK's own log lines. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, MaxBackoffDefault)
	c.CallTimeout = cmp.Or(c.CallTimeout, CallTimeoutDefault)
	c.Linger = cmp.Or(c.Linger, LingerDefault)
	c.DeleteLinger = cmp.Or(c.DeleteLinger, DeleteLingerDefault)
	c.StatsConcurrency = cmp.Or(c.StatsConcurrency, StatsConcurrencyDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.MaxAttempts < 1 {
		return fmt.Errorf("MaxAttempts must be at least 1, got %d", c.MaxAttempts)
	}
	if c.MaxBackoff < 0 {
		return fmt.Errorf("MaxBackoff must not be negative, got %s", c.MaxBackoff)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("CallTimeout must not be negative, got %s", c.CallTimeout)
	}
	if c.StatsConcurrency < 1 {
		return fmt.Errorf("StatsConcurrency must be at least 1, got %d", c.StatsConcurrency)
	}
	for name, url := range c.QueueURLs {
		if name == "" || url == "" {
			return fmt.Errorf("QueueURLs: empty name or URL (%q: %q)", name, url)
		}
	}
	return nil
}

// Backend is a queue.Backend on Amazon SQS standard queues. Create it with
// New; it is safe for concurrent use.
type Backend struct {
	client *sqs.Client
	cfg    Config
	log    *slog.Logger

	// lifecycle is held shared by Send while it hands entries to a
	// batcher, and exclusively by Close, so no entry is left pending after
	// Close.
	lifecycle   sync.RWMutex
	closed      atomic.Bool
	closeCtx    context.Context // canceled by Close: ends long polls
	closeCancel context.CancelFunc
	inflight    sync.WaitGroup // batch calls (SendMessageBatch, DeleteMessageBatch) under way

	mu       sync.Mutex
	urls     map[string]string // queue name → URL
	arns     map[string]string // queue name → ARN
	batchers map[batcherKey]flusher

	leases leases // receipt handles whose lease is known to hold

	calls [numOps]atomic.Int64

	// answersLost counts ReceiveMessage attempts the server answered
	// (200) whose answer could not be read; lostLine bounds their log
	// lines.
	answersLost atomic.Int64
	lostLine    ratelog.Line

	// Test hooks (export_test.go): receiveGrace replaces the constant
	// when set; receiveStarted is called just before each ReceiveMessage.
	receiveGrace   time.Duration
	receiveStarted func()
}

var _ queue.Backend = (*Backend)(nil)

// New returns a Backend configured by cfg. It makes no API call.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sqsqueue config: %w", err)
	}
	client := cfg.Client
	if client == nil {
		var err error
		client, err = newClient(ctx, cfg)
		if err != nil {
			return nil, err
		}
	}
	b := &Backend{
		client:   client,
		cfg:      cfg,
		log:      cfg.Logger,
		urls:     maps.Clone(cfg.QueueURLs),
		arns:     make(map[string]string),
		batchers: make(map[batcherKey]flusher),
	}
	if b.urls == nil {
		b.urls = make(map[string]string)
	}
	b.closeCtx, b.closeCancel = context.WithCancel(context.Background())
	return b, nil
}

// Region is the AWS region of the backend's SQS client: Config.Region, or
// the one the standard sources gave. A process publishes its CloudWatch
// metrics there, beside its queues and the Terraform module's alarms.
func (b *Backend) Region() string { return b.client.Options().Region }

// newClient builds the SQS client: the SDK's standard retryer with
// cfg.MaxAttempts attempts and backoff capped at cfg.MaxBackoff, and an HTTP
// client built with awshttp.NewBuildableClient (the SDK can then apply
// AWS_CA_BUNDLE to it, which it refuses for a plain http.Client).
func newClient(ctx context.Context, cfg Config) (*sqs.Client, error) {
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 5 * time.Second }).
		WithTransportOptions(func(tr *http.Transport) {
			// Concurrent long polls, batches and Stats share the pool;
			// the default of 10 idle connections per host would churn.
			tr.MaxIdleConns = 256
			tr.MaxIdleConnsPerHost = 128
		}).
		// No data for this long fails an attempt. A long poll sends
		// nothing for up to queue.MaxWait.
		WithReadTimeout(queue.MaxWait + cfg.CallTimeout)
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = cfg.MaxBackoff
			})
		}),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sqsqueue: load AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, ErrNoRegion
	}
	return sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.Logger = sdkLogger{log: cfg.Logger}
		o.EndpointResolverV2 = &cachedEndpoints{next: sqs.NewDefaultEndpointResolverV2()}
	}), nil
}

// sdkLogger sends the SDK's own log lines (by default printed to stderr)
// to Config.Logger: warnings at Warn, the rest at Debug.
type sdkLogger struct {
	log *slog.Logger
	ctx context.Context
}

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	ctx := l.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.log.Log(ctx, level, "aws sdk: "+fmt.Sprintf(format, v...), slog.String("operation", awsmiddleware.GetOperationName(ctx)))
}

func (l sdkLogger) WithContext(ctx context.Context) logging.Logger {
	return sdkLogger{log: l.log, ctx: ctx}
}

// Close stops the backend: Sends waiting for a batch are sent at once and
// waited for, long-polling Receives return ErrClosed, and later calls return
// ErrClosed. It is idempotent.
func (b *Backend) Close() error {
	b.lifecycle.Lock()
	if b.closed.Swap(true) {
		b.lifecycle.Unlock()
		return nil
	}
	b.closeCancel()
	b.mu.Lock()
	for _, bt := range b.batchers {
		bt.flushNow()
	}
	b.mu.Unlock()
	b.lifecycle.Unlock()
	b.inflight.Wait()
	return nil
}

func (b *Backend) errIfClosed(op string) error {
	if b.closed.Load() {
		return fmt.Errorf("sqs %s: %w", op, queue.ErrClosed)
	}
	return nil
}

// callCtx returns the context of one API call: ctx, ended by Close and by
// the per-call timeout (plus extra, for long polls).
func (b *Backend) callCtx(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.CallTimeout+extra)
	stop := context.AfterFunc(b.closeCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// Operation names counted by APICalls.
const (
	OpSendMessageBatch             = "SendMessageBatch"
	OpReceiveMessage               = "ReceiveMessage"
	OpDeleteMessageBatch           = "DeleteMessageBatch"
	OpChangeMessageVisibilityBatch = "ChangeMessageVisibilityBatch"
	OpGetQueueAttributes           = "GetQueueAttributes"
	OpGetQueueURL                  = "GetQueueUrl"
	OpCreateQueue                  = "CreateQueue"
	OpSetQueueAttributes           = "SetQueueAttributes"
	OpStartMessageMoveTask         = "StartMessageMoveTask"
	OpListQueues                   = "ListQueues"
	OpListMessageMoveTasks         = "ListMessageMoveTasks"
	OpCancelMessageMoveTask        = "CancelMessageMoveTask"
)

type op int

const (
	opSendMessageBatch op = iota
	opReceiveMessage
	opDeleteMessageBatch
	opChangeMessageVisibilityBatch
	opGetQueueAttributes
	opGetQueueURL
	opCreateQueue
	opSetQueueAttributes
	opStartMessageMoveTask
	opListQueues
	opListMessageMoveTasks
	opCancelMessageMoveTask
	numOps
)

var opNames = [numOps]string{
	OpSendMessageBatch, OpReceiveMessage, OpDeleteMessageBatch, OpChangeMessageVisibilityBatch,
	OpGetQueueAttributes, OpGetQueueURL, OpCreateQueue, OpSetQueueAttributes, OpStartMessageMoveTask,
	OpListQueues, OpListMessageMoveTasks, OpCancelMessageMoveTask,
}

// APICalls returns the number of SQS API requests this backend has sent,
// by operation name (the Op* constants; every one is present). Each attempt
// counts, retries included, since AWS bills each request: divide the sum by
// delivered jobs for the cost per job.
func (b *Backend) APICalls() map[string]int64 {
	m := make(map[string]int64, numOps)
	for i := range numOps {
		m[opNames[i]] = b.calls[i].Load()
	}
	return m
}

// ReceiveAnswersLost returns the number of ReceiveMessage attempts that
// SQS answered (HTTP 200) but whose answer this backend could not read:
// the messages SQS handed over in it stay hidden, received by no one,
// until their visibility timeout runs out. Each is logged as a warning
// (at most one line per 10 s).
func (b *Backend) ReceiveAnswersLost() int64 { return b.answersLost.Load() }

// count returns an SDK option that counts each attempt of an operation: a
// finalize-step middleware after the retry middleware runs once per attempt.
// A ReceiveMessage attempt whose answer was lost is counted as such too
// (lostAnswer).
func (b *Backend) count(o op) func(*sqs.Options) {
	return func(opts *sqs.Options) {
		opts.APIOptions = append(opts.APIOptions, func(stack *middleware.Stack) error {
			return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("sluiceCountAttempts",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					b.calls[o].Add(1)
					out, md, err := next.HandleFinalize(ctx, in)
					if o == opReceiveMessage && lostAnswer(err) {
						b.receiveAnswerLost(ctx, err)
					}
					return out, md, err
				}), "Retry", middleware.After)
		})
	}
}

// lostAnswer reports whether a failed attempt's error is that of an
// answer SQS sent with HTTP 200 and the client could not read or decode:
// SQS did the work. Against the local server, on a loaded machine, the
// client's own transport closed the connection under about one
// ReceiveMessage answer in 18,000 while it was read ("set tcp ...: use of
// closed network connection", the signature of aws/aws-sdk-go-v2#1825):
// each time, the ten messages of the lost answer came back only after
// the visibility timeout, 30 s late, and the drain benchmark's run
// stalled that long (docs/reliability.md has the same loss in a DLQ
// read).
func lostAnswer(err error) bool {
	var respErr *smithyhttp.ResponseError
	return err != nil && errors.As(err, &respErr) && respErr.HTTPStatusCode() == http.StatusOK
}

// receiveAnswerLost counts and logs a ReceiveMessage answer lost after
// SQS sent it: nothing can get its messages back sooner, but a job late
// by exactly the visibility timeout is then explained.
func (b *Backend) receiveAnswerLost(ctx context.Context, err error) {
	b.answersLost.Add(1)
	b.lostLine.Do(func(skipped int64) {
		b.log.WarnContext(ctx, "sqs receive: SQS answered but the answer could not be read; the messages it handed over stay hidden until their visibility timeout runs out",
			slog.Any("error", err), ratelog.Suppressed(skipped))
	})
}
