package cloudwatchpub

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/periodic"
)

// Defaults for PublisherConfig fields left zero.
const (
	NamespaceDefault = "Sluice"
	IntervalDefault  = time.Minute
)

// MaxDatumsPerRequest is the most metric data items one PutMetricData call
// carries. CloudWatch's limit: "Each PutMetricData request is limited to 1
// MB in size for HTTP POST requests. You can send a payload compressed by
// gzip. Each request is also limited to no more than 1000 different
// metrics." (Amazon CloudWatch API Reference, PutMetricData,
// https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricData.html,
// and the same text in aws-sdk-go-v2/service/cloudwatch v1.75.5
// api_op_PutMetricData.go; the limit was 20 until 2022.)
const MaxDatumsPerRequest = 1000

// maxRequestBytes bounds a batch's estimated encoded size, well under the
// 1 MB request limit. sluice's datums are about 100–300 bytes, so in
// practice only MaxDatumsPerRequest applies.
const maxRequestBytes = 512 << 10

// API is the part of *cloudwatch.Client the publisher uses.
type API interface {
	PutMetricData(ctx context.Context, params *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var _ API = (*cloudwatch.Client)(nil)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Client sends PutMetricData; required. Retries, timeouts and request
	// compression are the client's: the SDK's standard retryer makes 3
	// attempts with backoff for throttling, 5xx and connection errors, and
	// gzips bodies of at least Options.RequestMinCompressSizeBytes (10240
	// with config.LoadDefaultConfig).
	Client API
	// Namespace of every metric. Defaults to "Sluice".
	Namespace string
	// Interval between cycles, and the timeout of each; at least 1
	// second. Defaults to 1 minute, CloudWatch's standard resolution.
	Interval time.Duration
	// Gatherer is the Prometheus registry the /metrics handler serves;
	// required.
	Gatherer prometheus.Gatherer
	// Registerer, if set, receives the publisher's own counters
	// (sluice_cloudwatch_*), which are not published to CloudWatch.
	Registerer prometheus.Registerer
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now; it stamps each cycle's data.
	Now func() time.Time
}

func (c PublisherConfig) withDefaults() PublisherConfig {
	c.Namespace = cmp.Or(c.Namespace, NamespaceDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c PublisherConfig) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("cloudwatchpub: Client is required")
	case c.Gatherer == nil:
		return errors.New("cloudwatchpub: Gatherer is required")
	case c.Interval < time.Second:
		return fmt.Errorf("cloudwatchpub: Interval %v is under 1s", c.Interval)
	}
	return nil
}

// Stats are a publisher's running totals.
type Stats struct {
	Cycles         int64 // Publish calls that gathered the registry
	Requests       int64 // PutMetricData calls, each after the SDK's retries
	FailedRequests int64 // calls that failed after the SDK's retries
	DatumsSent     int64 // metric data items in successful calls
	DatumsDropped  int64 // metric data items in failed calls
}

// Publisher publishes a Prometheus registry to CloudWatch on a timer.
type Publisher struct {
	cfg PublisherConfig
	err error // from validate

	mu   sync.Mutex // one cycle at a time; guards conv
	conv *converter

	cycles, requests, failed, sent, dropped atomic.Int64
	reqCounter                              *prometheus.CounterVec
	datumCounter                            *prometheus.CounterVec

	life     sync.Mutex // guards the fields below
	started  bool
	stopped  bool
	stopErr  error
	stopTick context.CancelFunc // ends the timer; the cycle in progress goes on
	done     chan struct{}
	cancel   context.CancelFunc // cancels the cycle in progress
}

// NewPublisher returns a Publisher. A missing Client or Gatherer or an
// Interval under a second is reported by Start and Publish.
func NewPublisher(cfg PublisherConfig) *Publisher {
	cfg = cfg.withDefaults()
	p := &Publisher{
		cfg:  cfg,
		err:  cfg.validate(),
		conv: newConverter(),
		done: make(chan struct{}),
		reqCounter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cloudwatch_put_requests_total",
			Help: "PutMetricData calls by result (ok, error), each after the SDK's retries.",
		}, []string{"result"}),
		datumCounter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_cloudwatch_datums_total",
			Help: "CloudWatch metric data items by result: sent, or dropped with a failed call.",
		}, []string{"result"}),
	}
	if r := cfg.Registerer; r != nil {
		p.reqCounter = registerOrReuse(r, p.reqCounter)
		p.datumCounter = registerOrReuse(r, p.datumCounter)
	}
	return p
}

func registerOrReuse(r prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
	if err := r.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
	}
	return c
}

// Stats returns the running totals.
func (p *Publisher) Stats() Stats {
	return Stats{
		Cycles: p.cycles.Load(), Requests: p.requests.Load(), FailedRequests: p.failed.Load(),
		DatumsSent: p.sent.Load(), DatumsDropped: p.dropped.Load(),
	}
}

// Start publishes every Interval until Stop. ctx supplies values only: it
// does not stop the publisher. Each cycle's errors are logged (and
// counted), never fatal.
func (p *Publisher) Start(ctx context.Context) error {
	if p.err != nil {
		return p.err
	}
	p.life.Lock()
	defer p.life.Unlock()
	switch {
	case p.stopped:
		return errors.New("cloudwatchpub: start after stop")
	case p.started:
		return errors.New("cloudwatchpub: already started")
	}
	p.started = true
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	tickCtx, stopTick := context.WithCancel(loopCtx)
	p.cancel, p.stopTick = cancel, stopTick
	go p.loop(loopCtx, tickCtx)
	return nil
}

func (p *Publisher) loop(ctx, tickCtx context.Context) {
	defer close(p.done)
	periodic.Every(tickCtx, p.cfg.Interval, func(context.Context) {
		cycleCtx, cancel := context.WithTimeout(ctx, p.cfg.Interval)
		defer cancel()
		if err := p.Publish(cycleCtx); err != nil {
			p.cfg.Logger.ErrorContext(ctx, "publishing metrics to CloudWatch",
				slog.String("namespace", p.cfg.Namespace), slog.Any("error", err))
		}
	})
}

// Stop ends the timer, waits for a cycle in progress, and publishes once
// more so the last interval is not lost; it returns that final cycle's
// error. If ctx ends first, the cycle in progress is cancelled and Stop
// returns ctx's error. Safe to call twice (the second call returns the
// first one's result) or without Start (it publishes nothing, and a later
// Start fails).
func (p *Publisher) Stop(ctx context.Context) error {
	p.life.Lock()
	defer p.life.Unlock()
	if p.stopped {
		return p.stopErr
	}
	p.stopped = true
	if !p.started {
		return nil
	}
	defer p.cancel()
	p.stopTick()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cancel()
		<-p.done
		p.stopErr = fmt.Errorf("cloudwatchpub: stop: %w", ctx.Err())
		return p.stopErr
	}
	p.stopErr = p.Publish(ctx)
	return p.stopErr
}

// Publish runs one cycle: it gathers the registry, converts it (see the
// package doc) and sends it in batches of at most MaxDatumsPerRequest. A
// batch whose call fails after the SDK's retries is dropped and counted,
// and the other batches are still sent; the error returned joins the
// failures. Cycles do not overlap: a concurrent call waits.
func (p *Publisher) Publish(ctx context.Context) error {
	if p.err != nil {
		return p.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	fams, gatherErr := p.cfg.Gatherer.Gather()
	if gatherErr != nil {
		gatherErr = fmt.Errorf("cloudwatchpub: gather: %w", gatherErr)
		if len(fams) == 0 {
			return gatherErr
		}
	}
	p.cycles.Add(1)
	data := p.conv.convert(fams, p.cfg.Now())

	errs := []error{gatherErr}
	for batch := range batches(data) {
		_, err := p.cfg.Client.PutMetricData(ctx, &cloudwatch.PutMetricDataInput{
			Namespace:  aws.String(p.cfg.Namespace),
			MetricData: batch,
		})
		p.requests.Add(1)
		if err != nil {
			p.failed.Add(1)
			p.dropped.Add(int64(len(batch)))
			p.reqCounter.WithLabelValues("error").Inc()
			p.datumCounter.WithLabelValues("dropped").Add(float64(len(batch)))
			errs = append(errs, fmt.Errorf("cloudwatchpub: put metric data (%d datums dropped): %w", len(batch), err))
			continue
		}
		p.sent.Add(int64(len(batch)))
		p.reqCounter.WithLabelValues("ok").Inc()
		p.datumCounter.WithLabelValues("sent").Add(float64(len(batch)))
	}
	return errors.Join(errs...)
}

// batches splits data into PutMetricData-sized batches.
func batches(data []types.MetricDatum) func(yield func([]types.MetricDatum) bool) {
	return func(yield func([]types.MetricDatum) bool) {
		start, size := 0, 0
		for i := range data {
			n := estimateSize(&data[i])
			if i > start && (i-start == MaxDatumsPerRequest || size+n > maxRequestBytes) {
				if !yield(data[start:i:i]) {
					return
				}
				start, size = i, 0
			}
			size += n
		}
		if start < len(data) {
			yield(data[start:])
		}
	}
}

// estimateSize is an upper estimate of a datum's CBOR size: its strings
// plus field names and numbers.
func estimateSize(d *types.MetricDatum) int {
	n := 160 + len(aws.ToString(d.MetricName))
	for _, dim := range d.Dimensions {
		n += 24 + len(aws.ToString(dim.Name)) + len(aws.ToString(dim.Value))
	}
	return n
}
