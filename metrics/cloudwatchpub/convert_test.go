package cloudwatchpub

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sluice-dev/sluice/metrics"
)

func TestName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give     string
		typ      dto.MetricType
		wantName string
		wantUnit types.StandardUnit
	}{
		{"sluice_jobs_submitted_total", dto.MetricType_COUNTER, "JobsSubmitted", types.StandardUnitCount},
		{"sluice_enqueue_latency_seconds", dto.MetricType_HISTOGRAM, "EnqueueLatency", types.StandardUnitSeconds},
		{"sluice_queue_in_flight_messages", dto.MetricType_GAUGE, "QueueInFlightMessages", types.StandardUnitCount},
		{"sluice_queue_oldest_message_age_seconds", dto.MetricType_GAUGE, "QueueOldestMessageAge", types.StandardUnitSeconds},
		{"sluice_age_of_first_attempt_seconds", dto.MetricType_HISTOGRAM, "AgeOfFirstAttempt", types.StandardUnitSeconds},
		{"sluice_payload_bytes", dto.MetricType_HISTOGRAM, "Payload", types.StandardUnitBytes},
		{"sluice_gauge_total", dto.MetricType_GAUGE, "GaugeTotal", types.StandardUnitCount}, // _total only for counters
	}
	for _, tt := range tests {
		name, unit := Name(tt.give, tt.typ)
		if name != tt.wantName || unit != tt.wantUnit {
			t.Errorf("Name(%s) = %s, %s; want %s, %s", tt.give, name, unit, tt.wantName, tt.wantUnit)
		}
	}
}

func TestEstimateMinMax(t *testing.T) {
	t.Parallel()
	bounds := []float64{1, 2, 5, 10}
	tests := []struct {
		name           string
		counts         []uint64 // per bucket, the last is +Inf
		sum            float64
		wantLo, wantHi float64
	}{
		{"one sample is exact", []uint64{0, 0, 1, 0, 0}, 3.5, 3.5, 3.5},
		{"one sample past the last bound is exact", []uint64{0, 0, 0, 0, 1}, 42, 42, 42},
		{"one bucket", []uint64{0, 0, 3, 0, 0}, 10, 2, 5},
		{"two buckets, sum tightens both", []uint64{0, 1, 0, 1, 0}, 9, 1, 8}, // (1,2] and (5,10]: max ≤ 9−1, min ≥ 9−10
		{"first bucket starts at 0", []uint64{2, 0, 0, 0, 0}, 1.5, 0.5, 1},
		{"+Inf bucket bounded by the sum", []uint64{0, 2, 0, 0, 1}, 103, 1, 101}, // max ≤ 103 − 1 − 1 (the others' lower edges)
		{"all zero sum", []uint64{4, 0, 0, 0, 0}, 0, 0, 0},
	}
	for _, tt := range tests {
		var n uint64
		for _, c := range tt.counts {
			n += c
		}
		lo, hi := estimateMinMax(bounds, tt.counts, n, tt.sum)
		if math.Abs(lo-tt.wantLo) > 1e-9 || math.Abs(hi-tt.wantHi) > 1e-9 {
			t.Errorf("%s: min, max = %v, %v; want %v, %v", tt.name, lo, hi, tt.wantLo, tt.wantHi)
		}
		if mean := tt.sum / float64(n); lo > mean || hi < mean {
			t.Errorf("%s: mean %v outside [%v, %v]", tt.name, mean, lo, hi)
		}
	}
}

// TestConvert covers what the sluice metrics do not exercise: merging
// histograms across a dropped label, resets, non-finite values and foreign
// families.
func TestConvert(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_test_wait_seconds", Help: "h", Buckets: []float64{1, 10},
	}, []string{"lane", "shard"})
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_test_things_total", Help: "c"}, []string{"lane"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sluice_test_ratio", Help: "g"})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "elsewhere_total", Help: "c"})
	reg.MustRegister(h, c, g, other)
	conv := newConverter()
	now := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	cycle := func() map[string]types.MetricDatum {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]types.MetricDatum{}
		for _, d := range conv.convert(fams, now) {
			var dims []string
			for _, dim := range d.Dimensions {
				dims = append(dims, aws.ToString(dim.Name)+"="+aws.ToString(dim.Value))
			}
			out[aws.ToString(d.MetricName)+"{"+strings.Join(dims, ",")+"}"] = d
		}
		return out
	}

	h.WithLabelValues("a", "0").Observe(0.5)
	h.WithLabelValues("a", "1").Observe(20)
	c.WithLabelValues("a").Add(5)
	g.Set(math.NaN())
	other.Inc()
	got := cycle()
	if len(got) != 2 {
		t.Fatalf("datums %v, want the merged histogram and the counter only", keys(got))
	}
	s := got["TestWait{Lane=a}"].StatisticValues
	if s == nil || *s.SampleCount != 2 || *s.Sum != 20.5 || *s.Minimum != 0 || *s.Maximum != 20.5 {
		t.Errorf("merged histogram = %s", statString(s))
	}

	// A counter that went down was reset: its value is the increase.
	c.Reset()
	c.WithLabelValues("a").Add(2)
	h.WithLabelValues("a", "0").Observe(3)
	got = cycle()
	if d := got["TestThings{Lane=a}"]; d.Value == nil || *d.Value != 2 {
		t.Errorf("counter after reset = %v", d.Value)
	}
	if s := got["TestWait{Lane=a}"].StatisticValues; s == nil || *s.SampleCount != 1 || *s.Minimum != 3 || *s.Maximum != 3 {
		t.Errorf("histogram delta = %s", statString(s))
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func statString(s *types.StatisticSet) string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{n=%v sum=%v min=%v max=%v}", *s.SampleCount, *s.Sum, *s.Minimum, *s.Maximum)
}

func TestBatches(t *testing.T) {
	t.Parallel()
	datum := func(name string, dimLen int) types.MetricDatum {
		return types.MetricDatum{MetricName: aws.String(name), Dimensions: []types.Dimension{
			{Name: aws.String("Queue"), Value: aws.String(strings.Repeat("q", dimLen))},
		}}
	}
	tests := []struct {
		name   string
		n      int
		dimLen int
		want   []int
	}{
		{"empty", 0, 10, nil},
		{"one", 1, 10, []int{1}},
		{"exactly the limit", 1000, 10, []int{1000}},
		{"over the limit", 2001, 10, []int{1000, 1000, 1}},
		{"bounded by bytes", 1000, 1000, []int{439, 439, 122}}, // 1194 estimated bytes each, 512 KiB per batch
	}
	for _, tt := range tests {
		data := make([]types.MetricDatum, tt.n)
		for i := range data {
			data[i] = datum(fmt.Sprintf("M%04d", i), tt.dimLen)
		}
		var got []int
		for b := range batches(data) {
			got = append(got, len(b))
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: batches %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestTenantReloadsKeepTheirResult: TenantConfigReloads is published
// per Result (metrics/doc.go says to alarm on refused reloads); the
// result label was dropped and ok and refused reloads were added up
// (found in review). StoreCheckpoint keeps its Outcome likewise.
func TestTenantReloadsKeepTheirResult(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.Options{})
	m.TenantConfigReload(true)
	m.TenantConfigReload(true)
	m.TenantConfigReload(false)
	m.StoreCheckpoint(time.Millisecond, errors.New("disk full"))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, d := range newConverter().convert(fams, time.Now()) {
		switch aws.ToString(d.MetricName) {
		case "TenantConfigReloads", "StoreCheckpoint":
			var dims []string
			for _, dm := range d.Dimensions {
				dims = append(dims, aws.ToString(dm.Name)+"="+aws.ToString(dm.Value))
			}
			v := 0.0
			if d.Value != nil {
				v = *d.Value
			}
			got[aws.ToString(d.MetricName)+" "+strings.Join(dims, ",")] = v
		}
	}
	want := map[string]float64{"TenantConfigReloads Result=ok": 2, "TenantConfigReloads Result=refused": 1, "StoreCheckpoint Outcome=failed": 0}
	for k, v := range want {
		if g, ok := got[k]; !ok || (v > 0 && g != v) {
			t.Errorf("%s: %v (published %v), want %v", k, g, got, v)
		}
	}
}
