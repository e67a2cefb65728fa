package cloudwatchpub_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/startstop/startstoptest"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/cloudwatchpub"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	cw    *fakeCloudWatch
	reg   *prometheus.Registry
	m     *metrics.Metrics
	clock *fakeClock
	logs  *logBuffer
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// logBuffer is a slog handler target that keeps records and echoes them to
// t.Log.
type logBuffer struct {
	t  *testing.T
	mu sync.Mutex
	sb strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.t.Logf("%s", strings.TrimSpace(string(p)))
	return b.sb.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sb.String()
}

func setup(t *testing.T, mod ...func(*cloudwatchpub.PublisherConfig)) (*cloudwatchpub.Publisher, *testBundle) {
	t.Helper()
	cw := newFakeCloudWatch(t)
	reg := prometheus.NewRegistry()
	// Non-sluice families are in the registry too and must not be sent.
	reg.MustRegister(collectors.NewGoCollector())
	m := metrics.New(reg, metrics.Options{TopTenants: 2})
	clock := &fakeClock{now: time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)}
	logs := &logBuffer{t: t}
	cfg := cloudwatchpub.PublisherConfig{
		Client:     cw.client(),
		Gatherer:   reg,
		Registerer: reg,
		Logger:     slog.New(slog.NewTextHandler(logs, nil)),
		Now:        clock.Now,
	}
	for _, fn := range mod {
		fn(&cfg)
	}
	return cloudwatchpub.NewPublisher(cfg), &testBundle{cw: cw, reg: reg, m: m, clock: clock, logs: logs}
}

// byKey indexes datums by "Name{Dim=Value,...}".
func byKey(t *testing.T, puts []putRequest) map[string]datum {
	t.Helper()
	out := map[string]datum{}
	for _, p := range puts {
		if p.Namespace != cloudwatchpub.NamespaceDefault {
			t.Errorf("namespace = %q", p.Namespace)
		}
		for _, d := range p.Data {
			k := key(d.Name, d.Dims)
			if _, dup := out[k]; dup {
				t.Errorf("datum %s sent twice in one cycle", k)
			}
			out[k] = d
		}
	}
	return out
}

func key(name string, dims map[string]string) string {
	parts := make([]string, 0, len(dims))
	for k, v := range dims {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

func TestPublish(t *testing.T) {
	t.Parallel()
	p, bundle := setup(t)
	m := bundle.m
	ctx := t.Context()

	// Three tenants with K=2: the third is "other"; CloudWatch sums them.
	for range 3 {
		m.Submit("acme", "premium", "premium", metrics.OutcomeAdmitted)
	}
	m.Submit("bolt", "premium", "premium", metrics.OutcomeAdmitted)
	m.Submit("cato", "premium", "premium", metrics.OutcomeAdmitted)
	m.Submit("cato", "premium", "premium", metrics.OutcomeThrottledRate)
	m.Submit("", "", "", metrics.OutcomeUnauthenticated)
	m.EnqueueLatency("premium", 3*time.Millisecond)
	m.QueueDepth("sluice-premium-dlq", "premium", "dlq", 4, 1, 0, 90*time.Second)
	m.Drain("premium", metrics.ActionDelivered, "within_limits")
	m.Drain("premium", metrics.ActionLeaseLost, "")
	m.Dwell("premium", 2*time.Second)
	m.Dwell("premium", 7*time.Second)
	m.AgeOfFirstAttempt("premium", 1500*time.Millisecond)
	m.BackendCall("SendMessageBatch", 3)

	if err := p.Publish(ctx); err != nil {
		t.Fatalf("publish: %v", err)
	}
	puts := bundle.cw.take()
	if len(puts) != 1 {
		t.Fatalf("%d requests, want 1", len(puts))
	}
	if puts[0].Gzipped {
		t.Errorf("a %d-byte body was gzipped; the threshold is 10240", puts[0].WireBytes)
	}
	got := byKey(t, puts)
	for k, d := range got {
		if !d.Timestamp.Equal(bundle.clock.Now()) {
			t.Errorf("%s: timestamp %v, want %v", k, d.Timestamp, bundle.clock.Now())
		}
		if _, ok := d.Dims["Tenant"]; ok {
			t.Errorf("%s has a Tenant dimension", k)
		}
		if strings.HasPrefix(d.Name, "Go") || strings.HasPrefix(d.Name, "Cloudwatch") || strings.Contains(d.Name, "_") {
			t.Errorf("unexpected metric %s", k)
		}
	}

	value := func(v float64) *float64 { return &v }
	tests := []struct {
		key   string
		unit  string
		value *float64
		stats *statSet
	}{
		{"JobsSubmitted{Lane=premium,Outcome=admitted,Tier=premium}", "Count", value(5), nil},
		{"JobsSubmitted{Lane=premium,Outcome=throttled_rate,Tier=premium}", "Count", value(1), nil},
		{"JobsSubmitted{Lane=none,Outcome=unauthenticated,Tier=none}", "Count", value(1), nil},
		{"QueueVisibleMessages{Kind=dlq,Lane=premium,Queue=sluice-premium-dlq}", "Count", value(4), nil},
		{"QueueInFlightMessages{Kind=dlq,Lane=premium,Queue=sluice-premium-dlq}", "Count", value(1), nil},
		{"QueueDelayedMessages{Kind=dlq,Lane=premium,Queue=sluice-premium-dlq}", "Count", value(0), nil},
		{"QueueOldestMessageAge{Kind=dlq,Lane=premium,Queue=sluice-premium-dlq}", "Seconds", value(90), nil},
		{"DrainActions{Action=delivered,Lane=premium,Reason=within_limits}", "Count", value(1), nil},
		{"DrainActions{Action=lease_lost,Lane=premium,Reason=none}", "Count", value(1), nil},
		{"BackendCalls{Operation=SendMessageBatch}", "Count", value(3), nil},
		// Present from the start at 0, so that an alarm sees the first one.
		{"TenantConfigReloads{Result=ok}", "Count", value(0), nil},
		{"TenantConfigReloads{Result=refused}", "Count", value(0), nil},
		// 3 ms is in (2.5 ms, 5 ms]; one sample: min = max = the sample.
		{"EnqueueLatency{Lane=premium}", "Seconds", nil, &statSet{1, 0.003, 0.003, 0.003}},
		// 2 s in (1, 2.5], 7 s in (5, 10]: min ≥ 9 − 10 → 1, max ≤ 9 − 1 = 8.
		{"Dwell{Lane=premium}", "Seconds", nil, &statSet{2, 9, 1, 8}},
		{"AgeOfFirstAttempt{Lane=premium}", "Seconds", nil, &statSet{1, 1.5, 1.5, 1.5}},
	}
	for _, tt := range tests {
		d, ok := got[tt.key]
		if !ok {
			t.Errorf("missing %s", tt.key)
			continue
		}
		if d.Unit != tt.unit {
			t.Errorf("%s: unit %q, want %q", tt.key, d.Unit, tt.unit)
		}
		switch {
		case tt.value != nil && (d.Value == nil || !near(*d.Value, *tt.value)):
			t.Errorf("%s: value %v, want %v", tt.key, ptrString(d.Value), *tt.value)
		case tt.stats != nil && (d.Stats == nil || !nearStats(*d.Stats, *tt.stats)):
			t.Errorf("%s: statistics %+v, want %+v", tt.key, d.Stats, *tt.stats)
		}
	}
	if len(got) != len(tests) {
		var names []string
		for k := range got {
			names = append(names, k)
		}
		slices.Sort(names)
		t.Errorf("%d datums, want %d: %v", len(got), len(tests), names)
	}

	// Second cycle: counters are deltas (zero included), gauges current,
	// histograms only with new samples.
	bundle.clock.Advance(time.Minute)
	m.Submit("acme", "premium", "premium", metrics.OutcomeAdmitted)
	m.Submit("cato", "premium", "premium", metrics.OutcomeAdmitted)
	m.QueueDepth("sluice-premium-dlq", "premium", "dlq", 6, 0, 0, 150*time.Second)
	m.Dwell("premium", 40*time.Second)
	if err := p.Publish(ctx); err != nil {
		t.Fatalf("second publish: %v", err)
	}
	got = byKey(t, bundle.cw.take())
	second := []struct {
		key   string
		value *float64
		stats *statSet
	}{
		{"JobsSubmitted{Lane=premium,Outcome=admitted,Tier=premium}", value(2), nil},
		{"JobsSubmitted{Lane=premium,Outcome=throttled_rate,Tier=premium}", value(0), nil},
		{"QueueVisibleMessages{Kind=dlq,Lane=premium,Queue=sluice-premium-dlq}", value(6), nil},
		{"QueueOldestMessageAge{Kind=dlq,Lane=premium,Queue=sluice-premium-dlq}", value(150), nil},
		{"BackendCalls{Operation=SendMessageBatch}", value(0), nil},
		{"Dwell{Lane=premium}", nil, &statSet{1, 40, 40, 40}},
	}
	for _, tt := range second {
		d, ok := got[tt.key]
		switch {
		case !ok:
			t.Errorf("second cycle: missing %s", tt.key)
		case tt.value != nil && (d.Value == nil || !near(*d.Value, *tt.value)):
			t.Errorf("second cycle: %s = %v, want %v", tt.key, ptrString(d.Value), *tt.value)
		case tt.stats != nil && (d.Stats == nil || !nearStats(*d.Stats, *tt.stats)):
			t.Errorf("second cycle: %s = %+v, want %+v", tt.key, d.Stats, *tt.stats)
		}
	}
	for _, k := range []string{"EnqueueLatency{Lane=premium}", "AgeOfFirstAttempt{Lane=premium}"} {
		if _, ok := got[k]; ok {
			t.Errorf("second cycle: %s sent without new samples", k)
		}
	}
	if s := p.Stats(); s.Cycles != 2 || s.Requests != 2 || s.FailedRequests != 0 || s.DatumsSent != int64(len(tests)+len(got)) {
		t.Errorf("stats = %+v", s)
	}
}

// TestBatching publishes more datums than one request may carry.
func TestBatching(t *testing.T) {
	t.Parallel()
	p, bundle := setup(t)
	const queues = 2600 // × 4 gauges each = 10,400 datums, with 2 more
	for i := range queues {
		bundle.m.QueueDepth(fmt.Sprintf("sluice-lane%02d-shard-%04d", i%50, i), fmt.Sprintf("lane%02d", i%50), "shard", int64(i), 0, 0, 0)
	}
	if err := p.Publish(t.Context()); err != nil {
		t.Fatal(err)
	}
	puts := bundle.cw.take()
	total := 0
	for i, put := range puts {
		n := len(put.Data)
		total += n
		if n > cloudwatchpub.MaxDatumsPerRequest {
			t.Errorf("request %d carries %d datums, limit %d", i, n, cloudwatchpub.MaxDatumsPerRequest)
		}
		if !put.Gzipped {
			t.Errorf("request %d (%d datums, %d bytes) not gzipped", i, n, put.WireBytes)
		}
	}
	if want := 4*queues + 2; total != want || len(puts) != (want+999)/1000 { // and the 2 reload results
		t.Errorf("%d datums in %d requests, want %d in %d", total, len(puts), want, (want+999)/1000)
	}
	got := byKey(t, puts)
	k := key("QueueVisibleMessages", map[string]string{"Queue": "sluice-lane07-shard-1257", "Lane": "lane07", "Kind": "shard"})
	if d, ok := got[k]; !ok || d.Value == nil || *d.Value != 1257 {
		t.Errorf("%s = %+v", k, d)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name         string
		status       int
		errType      string
		queryError   string
		wantAttempts int // the SDK's attempts for the failing call
		wantCode     string
	}{
		{"internal error is retried", http.StatusInternalServerError, "InternalServiceFault", "InternalServiceError;Receiver", 3, "InternalServiceError"},
		{"throttling is retried", http.StatusBadRequest, "ThrottlingException", "Throttling;Sender", 3, "Throttling"},
		{"invalid parameter is not retried", http.StatusBadRequest, "InvalidParameterValueException", "InvalidParameterValue;Sender", 1, "InvalidParameterValue"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, bundle := setup(t)
			var mu sync.Mutex
			failing := true
			bundle.cw.fail = func(int) (int, string, string) {
				mu.Lock()
				defer mu.Unlock()
				if failing {
					return tt.status, tt.errType, tt.queryError
				}
				return 0, "", ""
			}
			for range 4 {
				bundle.m.Submit("acme", "free", "free", metrics.OutcomeAdmitted)
			}
			err := p.Publish(t.Context())
			if err == nil {
				t.Fatal("publish succeeded against a failing server")
			}
			apiErr, ok := errors.AsType[smithy.APIError](err)
			if !ok || apiErr.ErrorCode() != tt.wantCode {
				t.Errorf("error %v, want API error code %s", err, tt.wantCode)
			}
			if got := bundle.cw.attemptCount(); got != tt.wantAttempts {
				t.Errorf("%d attempts, want %d", got, tt.wantAttempts)
			}
			s := p.Stats()
			if s.FailedRequests != 1 || s.DatumsDropped == 0 || s.DatumsSent != 0 {
				t.Errorf("stats after failure: %+v", s)
			}
			if got := counterValue(t, bundle.reg, "sluice_cloudwatch_put_requests_total", "error"); got != 1 {
				t.Errorf("sluice_cloudwatch_put_requests_total{result=error} = %v, want 1", got)
			}

			// The server recovers: the next cycle works, and carries only
			// the increase since the dropped cycle.
			mu.Lock()
			failing = false
			mu.Unlock()
			bundle.m.Submit("acme", "free", "free", metrics.OutcomeAdmitted)
			if err := p.Publish(t.Context()); err != nil {
				t.Fatalf("publish after recovery: %v", err)
			}
			got := byKey(t, bundle.cw.take())
			k := "JobsSubmitted{Lane=free,Outcome=admitted,Tier=free}"
			if d := got[k]; d.Value == nil || *d.Value != 1 {
				t.Errorf("%s = %v after recovery, want 1", k, ptrString(d.Value))
			}
			for k := range got {
				if strings.HasPrefix(k, "CloudwatchPut") || strings.HasPrefix(k, "CloudwatchDatums") {
					t.Errorf("publisher's own metric %s was published", k)
				}
			}
			if s := p.Stats(); s.FailedRequests != 1 || s.Requests != 2 || s.DatumsSent == 0 {
				t.Errorf("stats after recovery: %+v", s)
			}
		})
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name, result string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if f.GetName() == name && m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestStartStop(t *testing.T) {
	t.Parallel()

	t.Run("publishes on the timer, flushes on stop", func(t *testing.T) {
		t.Parallel()
		p, bundle := setup(t, func(c *cloudwatchpub.PublisherConfig) { c.Interval = time.Second })
		bundle.m.BackendCall("ReceiveMessage", 1)
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := p.Start(t.Context()); err == nil {
			t.Error("second Start succeeded")
		}
		<-bundle.cw.arrived // the first tick
		bundle.m.BackendCall("ReceiveMessage", 2)
		if err := p.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(t.Context()); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
		var sum float64
		for _, put := range bundle.cw.take() {
			for _, d := range put.Data {
				if d.Name == "BackendCalls" {
					sum += *d.Value
				}
			}
		}
		if sum != 3 {
			t.Errorf("BackendCalls deltas add up to %v, want 3 (the stop flush carries the last ones)", sum)
		}
	})

	t.Run("failures are logged, the loop goes on", func(t *testing.T) {
		t.Parallel()
		p, bundle := setup(t, func(c *cloudwatchpub.PublisherConfig) { c.Interval = time.Second })
		bundle.cw.fail = func(n int) (int, string, string) {
			if n <= 3 { // the first call's three attempts
				return http.StatusServiceUnavailable, "ServiceUnavailable", ""
			}
			return 0, "", ""
		}
		bundle.m.BackendCall("ReceiveMessage", 1)
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-bundle.cw.arrived // the second tick succeeds
		if err := p.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if logs := bundle.logs.String(); !strings.Contains(logs, "publishing metrics to CloudWatch") || !strings.Contains(logs, "datums dropped") {
			t.Errorf("logs do not report the failed cycle:\n%s", logs)
		}
		if s := p.Stats(); s.FailedRequests != 1 || s.Requests < 2 {
			t.Errorf("stats = %+v", s)
		}
	})

	t.Run("stop without start publishes nothing", func(t *testing.T) {
		t.Parallel()
		p, bundle := setup(t)
		if err := p.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := bundle.cw.attemptCount(); n != 0 {
			t.Errorf("%d requests", n)
		}
		if err := p.Start(t.Context()); err == nil {
			t.Error("Start after Stop succeeded")
		}
	})

	t.Run("stop deadline", func(t *testing.T) {
		t.Parallel()
		p, bundle := setup(t, func(c *cloudwatchpub.PublisherConfig) { c.Interval = time.Second })
		hung, block := make(chan struct{}, 10), make(chan struct{})
		defer close(block)
		bundle.cw.fail = func(int) (int, string, string) {
			hung <- struct{}{}
			<-block
			return 0, "", ""
		}
		bundle.m.BackendCall("ReceiveMessage", 1)
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		<-hung // the first tick's request hangs
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		if err := p.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Stop = %v, want a deadline error", err)
		}
	})
}

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  cloudwatchpub.PublisherConfig
		want string
	}{
		{"no client", cloudwatchpub.PublisherConfig{Gatherer: prometheus.NewRegistry()}, "Client is required"},
		{"no gatherer", cloudwatchpub.PublisherConfig{Client: newFakeCloudWatch(t).client()}, "Gatherer is required"},
		{"tiny interval", cloudwatchpub.PublisherConfig{Client: newFakeCloudWatch(t).client(), Gatherer: prometheus.NewRegistry(), Interval: time.Millisecond}, "under 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := cloudwatchpub.NewPublisher(tt.cfg)
			for _, err := range []error{p.Publish(t.Context()), p.Start(t.Context())} {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %v, want one containing %q", err, tt.want)
				}
			}
			if err := p.Stop(t.Context()); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func nearStats(a, b statSet) bool {
	return near(a.SampleCount, b.SampleCount) && near(a.Sum, b.Sum) && near(a.Minimum, b.Minimum) && near(a.Maximum, b.Maximum)
}

func ptrString(f *float64) string {
	if f == nil {
		return "<nil>"
	}
	return fmt.Sprint(*f)
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	startstoptest.Exercise(t, func(t *testing.T) startstop.Service {
		p, _ := setup(t, func(c *cloudwatchpub.PublisherConfig) { c.Interval = time.Hour })
		return p
	})
}

// TestDimensionValuesCloudWatchAccepts: CloudWatch refuses a whole
// PutMetricData call (up to 1000 datums) when one dimension value is not
// ASCII, holds a control character, is only whitespace or is longer than
// 1024 characters. A tier is any name the tenant file gives it, so one
// tier named "prémium" lost every metric in its batch, every cycle. Such
// values are now made acceptable (each offending character becomes '_',
// a blank value "none", a long one cut), keeping the metric.
func TestDimensionValuesCloudWatchAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct{ tier, want string }{
		{"prémium", "pr_mium"},
		{"gold tier", "gold tier"},
		{"   ", cloudwatchpub.EmptyDimensionValue},
		{"a\tb", "a_b"},
		{"ok", "ok"},
	}
	p, bundle := setup(t)
	for _, tt := range tests {
		bundle.m.Submit("t", tt.tier, "std", metrics.OutcomeAdmitted)
	}
	long := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_test_long_queue"}, []string{"queue"})
	bundle.reg.MustRegister(long)
	long.WithLabelValues(strings.Repeat("q", 2000)).Set(1)

	if err := p.Publish(t.Context()); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n := bundle.cw.rejectedCount(); n != 0 {
		t.Errorf("%d PutMetricData calls refused for an invalid dimension value", n)
	}
	got := byKey(t, bundle.cw.take())
	for _, tt := range tests {
		k := key("JobsSubmitted", map[string]string{"Tier": tt.want, "Lane": "std", "Outcome": metrics.OutcomeAdmitted})
		if d, ok := got[k]; !ok || d.Value == nil || *d.Value != 1 {
			t.Errorf("tier %q: %s = %+v, want 1 (published: %v)", tt.tier, k, d, keys(got))
		}
	}
	if _, ok := got[key("TestLongQueue", map[string]string{"Queue": strings.Repeat("q", 1024)})]; !ok {
		t.Errorf("a 2000-character queue label: no TestLongQueue with its first 1024 characters (published: %v)", keys(got))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// recorder is an API that keeps the datums it is sent, for tests that run
// in a synctest bubble (no network).
type recorder struct {
	mu   sync.Mutex
	data []types.MetricDatum
}

func (r *recorder) PutMetricData(_ context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data = append(r.data, in.MetricData...)
	return &cloudwatch.PutMetricDataOutput{}, nil
}

// take returns the sum of the values sent for name since the last take.
func (r *recorder) take(name string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sum float64
	for _, d := range r.data {
		if aws.ToString(d.MetricName) == name && d.Value != nil {
			sum += *d.Value
		}
	}
	r.data = nil
	return sum
}

// TestTenantRelabeledBetweenCycles: package metrics deletes a tenant's
// series when the tenant leaves the top K and starts a new one from zero
// when it comes back. With a publish interval longer than the top-K
// refresh (--cloudwatch-interval 5m, refresh 1m) both can happen between
// two cycles; the publisher took the new series for the old one and
// subtracted the old total from it, so JobsSubmitted lost that many jobs.
func TestTenantRelabeledBetweenCycles(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.New(reg, metrics.Options{TopTenants: 1, TenantRefresh: time.Minute})
		rec := &recorder{}
		p := cloudwatchpub.NewPublisher(cloudwatchpub.PublisherConfig{Client: rec, Gatherer: reg, Interval: 5 * time.Minute})
		submit := func(tenant string, n int) {
			for range n {
				m.Submit(tenant, "standard", "std", metrics.OutcomeAdmitted)
			}
		}
		publish := func() float64 {
			t.Helper()
			if err := p.Publish(t.Context()); err != nil {
				t.Fatal(err)
			}
			return rec.take("JobsSubmitted")
		}

		submit("a", 100) // a holds the only label
		if got := publish(); got != 100 {
			t.Fatalf("first cycle: JobsSubmitted %v, want 100", got)
		}
		submit("b", 300) // counted as other
		time.Sleep(time.Minute)
		submit("a", 1000) // refresh: b takes the label, a's series is deleted
		time.Sleep(time.Minute)
		submit("a", 150) // refresh: a takes it back, a new series from zero
		want := float64(300 + 1000 + 150)
		if got := publish(); got != want {
			t.Errorf("second cycle: JobsSubmitted %v, want %v (every job submitted since the first)", got, want)
		}
	})
}
