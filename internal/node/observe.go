package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/tracing"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/cloudwatchpub"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/topology"
)

// ObserveFlags configure metrics and trace export.
type ObserveFlags struct {
	MetricsListen       string
	CloudWatchNamespace string
	CloudWatchInterval  time.Duration
	// OTLPEndpoint turns tracing on: spans go to this OTLP/gRPC collector.
	OTLPEndpoint string
	// serviceName is the traces' service.name: sluice-<flag set name>.
	serviceName string
}

// Register adds the metrics flags to fs; defaultListen is the binary's
// default /metrics address.
func (f *ObserveFlags) Register(fs *flag.FlagSet, defaultListen string) {
	fs.StringVar(&f.MetricsListen, "metrics-listen", defaultListen, "address of the Prometheus /metrics endpoint; empty turns it off")
	fs.StringVar(&f.CloudWatchNamespace, "cloudwatch-namespace", "", "publish the same metrics to CloudWatch under this namespace; empty turns it off")
	flagconf.DurationVar(fs, &f.CloudWatchInterval, "cloudwatch-interval", time.Minute, "how often metrics are published to CloudWatch; at most 1m for the Terraform module's alarms, which read one-minute periods")
	fs.StringVar(&f.OTLPEndpoint, "otlp-endpoint", "", "export OpenTelemetry traces to this OTLP/gRPC collector: host:port (plain text), http://host:port or https://host:port; empty turns tracing off. OTEL_EXPORTER_OTLP_HEADERS, OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME and the like apply")
	f.serviceName = "sluice-" + fs.Name()
}

// Validate checks the flags' values, naming the flag to fix. The
// publisher took a --cloudwatch-interval of 0 as its 1m default, and
// refused one under 1s naming no flag, after the store was open (found in
// review).
func (f ObserveFlags) Validate() error {
	if f.CloudWatchNamespace != "" && f.CloudWatchInterval < time.Second {
		return fmt.Errorf("--cloudwatch-interval %s: must be at least 1s, such as 1m (each publish is billed)", f.CloudWatchInterval)
	}
	return nil
}

// Observer owns a process's metrics (the registry, the /metrics server,
// the CloudWatch publisher and the backend-call poller) and its trace
// exporter.
type Observer struct {
	Metrics *metrics.Metrics
	queues  map[string]topology.QueueInfo
	log     *slog.Logger
	srv     *http.Server
	pub     *cloudwatchpub.Publisher
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// polling waits for the backend-call poller, whose last count (made
	// once cancel is called) the last CloudWatch publish must carry.
	polling sync.WaitGroup
	// stopTracing flushes and stops the trace exporter; nil when off.
	stopTracing func(context.Context) error
	stopOnce    sync.Once
	stopErr     error
}

// StartObserver starts exporting metrics, and traces with
// f.OTLPEndpoint, as f asks.
func StartObserver(ctx context.Context, f ObserveFlags, backend queue.Backend, topo topology.Topology, log *slog.Logger) (*Observer, error) {
	// Tracing first: the gateway and drainers take the global tracer
	// provider it installs when they are built.
	var stopTracing func(context.Context) error
	if f.OTLPEndpoint != "" {
		var err error
		if stopTracing, err = tracing.Setup(ctx, tracing.Config{Endpoint: f.OTLPEndpoint, ServiceName: f.serviceName}); err != nil {
			return nil, fmt.Errorf("tracing (--otlp-endpoint): %w", err)
		}
		log.InfoContext(ctx, "exporting traces", slog.String("otlp_endpoint", f.OTLPEndpoint))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o := &Observer{Metrics: metrics.New(reg, metrics.Options{}), queues: map[string]topology.QueueInfo{}, log: log, stopTracing: stopTracing}
	for _, q := range topo.Queues() {
		o.queues[q.Spec.Name] = q
	}
	ctx, o.cancel = context.WithCancel(context.WithoutCancel(ctx))
	// fail stops what was started (the tracer, the metrics server) before
	// a later step's error.
	fail := func(err error) (*Observer, error) {
		return nil, errors.Join(err, o.Stop(context.WithoutCancel(ctx)))
	}
	if f.MetricsListen != "" {
		lis, err := net.Listen("tcp", f.MetricsListen)
		if err != nil {
			return fail(fmt.Errorf("metrics listener (--metrics-listen %s): %w", f.MetricsListen, err))
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", metrics.Handler(reg))
		// Profiles, for finding where time goes (go tool pprof
		// http://<metrics-listen>/debug/pprof/profile); the listener is
		// loopback unless --metrics-listen says otherwise.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		o.srv = &http.Server{Handler: mux}
		SetHTTPTimeouts(o.srv)
		o.wg.Go(func() {
			if err := o.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", slog.Any("error", err))
			}
		})
		log.InfoContext(ctx, "metrics listening", slog.String("addr", lis.Addr().String()))
	}
	if f.CloudWatchNamespace != "" {
		// On SQS, publish to the queues' region (--aws-region), where
		// the Terraform module's alarms and dashboard read the metrics.
		var opts []func(*config.LoadOptions) error
		if r, ok := backend.(interface{ Region() string }); ok && r.Region() != "" {
			opts = append(opts, config.WithRegion(r.Region()))
		}
		awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return fail(fmt.Errorf("cloudwatch (--cloudwatch-namespace): %w", err))
		}
		if awsCfg.Region == "" {
			// Every publish would fail, each logged, and the alarms that
			// read the metrics would see no data: refuse to start instead.
			return fail(errors.New("cloudwatch (--cloudwatch-namespace): no AWS region: set AWS_REGION (or the region of the shared config's profile)"))
		}
		o.pub = cloudwatchpub.NewPublisher(cloudwatchpub.PublisherConfig{
			Client: cloudwatch.NewFromConfig(awsCfg), Namespace: f.CloudWatchNamespace, Interval: f.CloudWatchInterval,
			Gatherer: reg, Registerer: reg, Logger: log,
		})
		if err := o.pub.Start(ctx); err != nil {
			return fail(fmt.Errorf("cloudwatch publisher: %w", err))
		}
		if f.CloudWatchInterval > time.Minute {
			log.WarnContext(ctx, "--cloudwatch-interval is over a minute: the Terraform module's alarms read one-minute periods, "+
				"see no data in most of them (treated as not breaching) and cannot fire; use 1m or less",
				slog.Duration("cloudwatch_interval", f.CloudWatchInterval))
		}
	} else if _, sqs := backend.(interface{ Region() string }); sqs {
		// The alarms treat missing data as not breaching: with nothing
		// published they stay green whatever happens.
		log.InfoContext(ctx, "CloudWatch publishing is off (no --cloudwatch-namespace): the Terraform module's first-attempt-age alarms read sluice's own metrics and stay green without them")
	}
	if counter, ok := backend.(interface{ APICalls() map[string]int64 }); ok {
		lost := func() int64 { return 0 }
		if l, ok := backend.(interface{ ReceiveAnswersLost() int64 }); ok {
			lost = l.ReceiveAnswersLost
		}
		o.polling.Go(func() { o.pollAPICalls(ctx, counter.APICalls, lost) })
	}
	if store, ok := backend.(interface {
		ObserveWrites(func(ops int, took time.Duration))
		ObserveCheckpoints(func(took time.Duration, err error))
	}); ok {
		store.ObserveWrites(o.Metrics.StoreWrite)
		store.ObserveCheckpoints(o.Metrics.StoreCheckpoint)
	}
	if store, ok := backend.(interface{ ObserveCorruptMessages(func()) }); ok {
		o.Metrics.StoreCorruptMessages(0)
		store.ObserveCorruptMessages(func() { o.Metrics.StoreCorruptMessages(1) })
	}
	return o, nil
}

// pollAPICalls turns the backend's running call counts, and of receive
// answers it lost, into counter increments every few seconds.
func (o *Observer) pollAPICalls(ctx context.Context, calls func() map[string]int64, lost func() int64) {
	last := map[string]int64{}
	var lastLost int64
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		done := false
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
		}
		for op, n := range calls() {
			if d := n - last[op]; d > 0 {
				o.Metrics.BackendCall(op, int(d))
			}
			last[op] = n
		}
		n := lost()
		o.Metrics.ReceiveAnswersLost(int(n - lastLost))
		lastLost = n
		if done {
			return
		}
	}
}

// ObserveDepth exports one queue's stats, for depth.Config.Observe.
func (o *Observer) ObserveDepth(s queue.Stats) {
	if q, ok := o.queues[s.Queue]; ok {
		o.Metrics.QueueDepth(s.Queue, q.Lane, string(q.Kind), s.Visible, s.InFlight, s.Delayed, s.OldestAge)
	}
}

// Stop flushes the spans not yet exported, publishes the last interval to
// CloudWatch and stops serving, within ctx; it returns the first failure.
// Idempotent (a second call returns the first's result). StartObserver
// started the observer: the startstop lifecycle's Start is that.
func (o *Observer) Stop(ctx context.Context) error {
	o.stopOnce.Do(func() { o.stopErr = o.stop(ctx) })
	return o.stopErr
}

func (o *Observer) stop(ctx context.Context) error {
	var errs []error
	o.cancel()
	o.polling.Wait() // its last count, before the last publish
	if o.stopTracing != nil {
		// Five seconds at most, so an unreachable collector leaves time
		// for the last CloudWatch publish.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := o.stopTracing(tctx); err != nil {
			errs = append(errs, fmt.Errorf("flush traces: %w", err))
		}
		cancel()
	}
	if o.pub != nil {
		if err := o.pub.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop cloudwatch publisher: %w", err))
		}
	}
	if o.srv != nil {
		if err := o.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop metrics server: %w", err))
		}
	}
	o.wg.Wait()
	return errors.Join(errs...)
}

// StopOnExit stops s within d and logs a failure: for a defer at the end
// of a process's run.
func StopOnExit(s startstop.Stopper, d time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		log.Warn("shutdown", slog.Any("error", err))
	}
}
