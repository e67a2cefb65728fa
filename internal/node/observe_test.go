package node

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/cloudwatchpub"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/topology"
)

// TestObserverStop starts an observer serving /metrics on a loopback port:
// Stop ends the server, and a second Stop returns the first's result.
func TestObserverStop(t *testing.T) {
	t.Parallel()
	b := topotest.Setup(t, topotest.OneLane)
	o, err := StartObserver(t.Context(), ObserveFlags{MetricsListen: "127.0.0.1:0"}, b.Backend, b.Topo, topotest.QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	if o.srv == nil {
		t.Fatal("no metrics server")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range 2 {
		if err := o.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	if err := o.srv.ListenAndServe(); err != http.ErrServerClosed {
		t.Fatalf("metrics server after Stop: %v, want it closed", err)
	}
}

// apiRecorder is a cloudwatchpub.API that adds up the BackendCalls it is
// sent.
type apiRecorder struct {
	mu    sync.Mutex
	calls float64
}

func (r *apiRecorder) PutMetricData(_ context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range in.MetricData {
		if aws.ToString(d.MetricName) == "BackendCalls" && d.Value != nil {
			r.calls += *d.Value
		}
	}
	return &cloudwatch.PutMetricDataOutput{}, nil
}

// TestObserverStopPublishesTheLastBackendCalls: Stop's last CloudWatch
// publish must carry the backend calls the poller counts on its way out
// (the process's last deletes and moves). The poller's last count and
// the publisher's flush ran side by side, and the flush could go first,
// so the last calls never reached CloudWatch.
func TestObserverStopPublishesTheLastBackendCalls(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		rec := &apiRecorder{}
		o := &Observer{
			Metrics: metrics.New(reg, metrics.Options{}),
			log:     topotest.QuietLog,
			pub:     cloudwatchpub.NewPublisher(cloudwatchpub.PublisherConfig{Client: rec, Gatherer: reg, Interval: time.Hour}),
		}
		var ctx context.Context
		ctx, o.cancel = context.WithCancel(t.Context())
		if err := o.pub.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var n, lost int64
		o.polling.Go(func() {
			o.pollAPICalls(ctx, func() map[string]int64 {
				mu.Lock()
				defer mu.Unlock()
				if ctx.Err() != nil {
					time.Sleep(time.Second) // the last count takes a while
				}
				return map[string]int64{"DeleteMessageBatch": n}
			}, func() int64 {
				mu.Lock()
				defer mu.Unlock()
				return lost
			})
		})
		mu.Lock()
		n, lost = 7, 2 // calls made, and answers lost, while the process stops, counted on the way out
		mu.Unlock()
		if err := o.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		o.polling.Wait() // a no-op once Stop waits for the poller itself
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.calls != 7 {
			t.Errorf("BackendCalls published %v, want 7", rec.calls)
		}
		if got := counterValue(t, reg, metrics.NameReceiveAnswersLost); got != 2 {
			t.Errorf("%s = %v, want 2", metrics.NameReceiveAnswersLost, got)
		}
	})
}

// counterValue is the value of a counter without labels in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestObserverPublishesToTheQueuesRegion: on SQS the CloudWatch publisher
// signs for the region of the queues (--aws-region), where the Terraform
// module puts the alarms and the dashboard that read the metrics. It took
// the SDK's region alone (AWS_REGION, the shared config), so with
// --aws-region the metrics went to another region, or, with no
// AWS_REGION, nowhere, and the first-attempt-age alarms never fired.
func TestObserverPublishesToTheQueuesRegion(t *testing.T) {
	// Not parallel: t.Setenv.
	var (
		mu    sync.Mutex
		auths []string
	)
	cw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
		w.WriteHeader(http.StatusOK) // an empty body is success
	}))
	t.Cleanup(cw.Close)
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_CLOUDWATCH": cw.URL,
		"AWS_REGION":                  "us-east-1", // the environment's, not the queues'
		"AWS_DEFAULT_REGION":          "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             none,
		"AWS_SHARED_CREDENTIALS_FILE": none,
		"AWS_ACCESS_KEY_ID":           "AKIDTEST",
		"AWS_SECRET_ACCESS_KEY":       "secret",
		"AWS_SESSION_TOKEN":           "",
	} {
		t.Setenv(k, v)
	}
	// New makes no API call: the SQS endpoint is never dialled.
	b, err := sqsqueue.New(t.Context(), sqsqueue.Config{Region: "eu-west-3", Endpoint: "http://127.0.0.1:1", Logger: topotest.QuietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	o, err := StartObserver(t.Context(), ObserveFlags{CloudWatchNamespace: "Test", CloudWatchInterval: time.Hour}, b, topology.Default(), log)
	if err != nil {
		t.Fatal(err)
	}
	// An hour between publishes leaves the alarms' one-minute periods
	// without data: said at start, as the flag's help says it.
	if !strings.Contains(logs.String(), "--cloudwatch-interval is over a minute") {
		t.Errorf("start-up log %q does not warn that the alarms cannot fire", logs.String())
	}
	o.Metrics.AgeOfFirstAttempt("premium", time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := o.Stop(ctx); err != nil { // the last publish
		t.Fatalf("Stop: %v", err)
	}
	// On SQS with no namespace nothing is published, and the alarms,
	// which treat missing data as not breaching, stay green: said at start.
	var quiet syncbuf.Buffer
	o, err = StartObserver(t.Context(), ObserveFlags{}, b, topology.Default(), slog.New(slog.NewTextHandler(&quiet, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(quiet.String(), "CloudWatch publishing is off") {
		t.Errorf("start-up log %q does not say that nothing is published for the alarms", quiet.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(auths) == 0 {
		t.Fatal("nothing was published")
	}
	for _, a := range auths {
		if !strings.Contains(a, "/eu-west-3/monitoring/aws4_request") {
			t.Errorf("PutMetricData signed as %q, want for eu-west-3, the queues' region", a)
		}
	}
}

// TestObserverRefusesCloudWatchWithoutARegion: with no region every
// publish failed, logged each cycle, and the process ran on with alarms
// reading no data. It now refuses to start, saying what to set, and lets
// go of the metrics listener it had opened.
// withoutAWSRegion clears every place the AWS SDK finds a region in, for
// t (which must not be parallel: t.Setenv).
func withoutAWSRegion(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none,
	} {
		t.Setenv(k, v)
	}
}

func TestObserverRefusesCloudWatchWithoutARegion(t *testing.T) {
	withoutAWSRegion(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	_, err = StartObserver(t.Context(), ObserveFlags{MetricsListen: addr, CloudWatchNamespace: "Test", CloudWatchInterval: time.Minute}, nil, topology.Default(), topotest.QuietLog)
	if err == nil || !strings.Contains(err.Error(), "set AWS_REGION") {
		t.Fatalf("StartObserver = %v, want a refusal saying to set AWS_REGION", err)
	}
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the metrics listener %s was left open: %v", addr, err)
	}
	again.Close()
}
