package cloudwatchpub

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/metrics"
)

// Prefix selects the metric families published: sluice's, except the
// publisher's own (OwnPrefix).
const (
	Prefix    = "sluice_"
	OwnPrefix = "sluice_cloudwatch_"
)

// prometheusOnly are the families labelled by tenant whose values are
// meaningless added up, so they are not published.
var prometheusOnly = map[string]bool{metrics.NameDrainTenantShare: true}

// dimensions maps the Prometheus labels that become CloudWatch dimensions
// to the dimension names. Every other label (tenant above all) is dropped
// and the series that differ only in dropped labels are added up.
var dimensions = map[string]string{
	"lane":      "Lane",
	"queue":     "Queue",
	"kind":      "Kind",
	"action":    "Action",
	"reason":    "Reason",
	"outcome":   "Outcome",
	"tier":      "Tier",
	"operation": "Operation",
	"result":    "Result", // tenant config reloads: ok or refused (alarm on refused)
}

// EmptyDimensionValue stands for an empty or blank label value (CloudWatch
// needs a non-whitespace value), so a metric keeps one dimension set: a
// drain action without a sideliner reason has Reason "none".
const EmptyDimensionValue = "none"

// maxDimensionValueLen is the longest dimension value CloudWatch takes.
const maxDimensionValueLen = 1024

// dimensionValue returns a label value as a dimension value CloudWatch
// accepts: 1 to 1024 ASCII characters, not all whitespace, no control
// characters (one bad value fails the whole PutMetricData call). Each
// other character becomes '_', a value longer than 1024 is cut, and an
// empty or blank one is EmptyDimensionValue. Label values that differ only
// in what this changes are added up as one dimension value.
func dimensionValue(v string) string {
	if strings.TrimSpace(v) == "" {
		return EmptyDimensionValue
	}
	var b strings.Builder
	for _, r := range v {
		if b.Len() == maxDimensionValueLen {
			break
		}
		if r < 0x20 || r > 0x7e {
			r = '_'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Name returns the CloudWatch metric name and unit for a Prometheus family:
// the name without the "sluice_" prefix, the "_total" suffix of counters
// and a unit suffix ("_seconds", "_bytes"), in CamelCase. The unit is
// Seconds or Bytes from the suffix, else Count.
func Name(promName string, typ dto.MetricType) (string, types.StandardUnit) {
	s := strings.TrimPrefix(promName, Prefix)
	if typ == dto.MetricType_COUNTER {
		s = strings.TrimSuffix(s, "_total")
	}
	unit := types.StandardUnitCount
	switch {
	case strings.HasSuffix(s, "_seconds"):
		s, unit = strings.TrimSuffix(s, "_seconds"), types.StandardUnitSeconds
	case strings.HasSuffix(s, "_bytes"):
		s, unit = strings.TrimSuffix(s, "_bytes"), types.StandardUnitBytes
	}
	var b strings.Builder
	for word := range strings.SplitSeq(s, "_") {
		if word == "" {
			continue
		}
		b.WriteString(strings.ToUpper(word[:1]))
		b.WriteString(word[1:])
	}
	return b.String(), unit
}

// converter turns gathered families into datums, remembering each series'
// last counter and histogram values to publish deltas.
type converter struct {
	prev map[string]prevSample // by series: family name and every label
}

type prevSample struct {
	// created is the series' creation time (Prometheus's created
	// timestamp), zero if it has none. A series deleted and made again
	// between two cycles (package metrics does so when a tenant leaves the
	// top K and comes back) has a new one: it is a new series, whatever
	// its value.
	created time.Time
	value   float64  // counter
	count   uint64   // histogram
	sum     float64  // histogram
	buckets []uint64 // histogram, cumulative
}

func newConverter() *converter { return &converter{prev: map[string]prevSample{}} }

// agg is one CloudWatch metric (name and dimensions) in a cycle.
type agg struct {
	name  string
	unit  types.StandardUnit
	dims  []types.Dimension
	kind  dto.MetricType
	value float64
	// histograms
	bounds []float64 // finite upper bounds
	counts []uint64  // per bucket (not cumulative), len(bounds)+1
	count  uint64
	sum    float64
}

func (c *converter) convert(fams []*dto.MetricFamily, now time.Time) []types.MetricDatum {
	next := make(map[string]prevSample, len(c.prev))
	var aggs []*agg
	index := map[string]*agg{}
	var key strings.Builder
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, Prefix) || strings.HasPrefix(name, OwnPrefix) || prometheusOnly[name] {
			continue
		}
		typ := f.GetType()
		if typ != dto.MetricType_COUNTER && typ != dto.MetricType_GAUGE && typ != dto.MetricType_HISTOGRAM {
			continue
		}
		cwName, unit := Name(name, typ)
		for _, m := range f.GetMetric() {
			key.Reset()
			key.WriteString(name)
			var dims []types.Dimension
			for _, lp := range m.GetLabel() {
				key.WriteByte(0xff)
				key.WriteString(lp.GetName())
				key.WriteByte(0xfe)
				key.WriteString(lp.GetValue())
				if dn, ok := dimensions[lp.GetName()]; ok {
					dims = append(dims, types.Dimension{Name: aws.String(dn), Value: aws.String(dimensionValue(lp.GetValue()))})
				}
			}
			seriesKey := key.String()
			slices.SortFunc(dims, func(a, b types.Dimension) int { return strings.Compare(*a.Name, *b.Name) })
			key.Reset()
			key.WriteString(cwName)
			for _, d := range dims {
				key.WriteByte(0xff)
				key.WriteString(*d.Name)
				key.WriteByte(0xfe)
				key.WriteString(*d.Value)
			}
			a := index[key.String()]
			if a == nil {
				a = &agg{name: cwName, unit: unit, dims: dims, kind: typ}
				index[key.String()] = a
				aggs = append(aggs, a)
			}
			prev, seen := c.prev[seriesKey]
			switch typ {
			case dto.MetricType_COUNTER:
				v := m.GetCounter().GetValue()
				created := createdTime(m.GetCounter().GetCreatedTimestamp())
				seen = seen && prev.created.Equal(created)
				next[seriesKey] = prevSample{created: created, value: v}
				if seen && v >= prev.value {
					v -= prev.value
				} // else new series or reset: everything counted so far is new
				a.value += v
			case dto.MetricType_GAUGE:
				a.value += m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				c.addHistogram(a, m.GetHistogram(), prev, seen, seriesKey, next)
			}
		}
	}
	c.prev = next

	ts := aws.Time(now)
	out := make([]types.MetricDatum, 0, len(aggs))
	for _, a := range aggs {
		d := types.MetricDatum{MetricName: aws.String(a.name), Dimensions: a.dims, Unit: a.unit, Timestamp: ts}
		if a.kind == dto.MetricType_HISTOGRAM {
			if a.count == 0 || !finite(a.sum) {
				continue // no samples this interval
			}
			lo, hi := estimateMinMax(a.bounds, a.counts, a.count, a.sum)
			d.StatisticValues = &types.StatisticSet{
				SampleCount: aws.Float64(float64(a.count)),
				Sum:         aws.Float64(a.sum),
				Minimum:     aws.Float64(lo),
				Maximum:     aws.Float64(hi),
			}
		} else {
			if !finite(a.value) {
				continue // CloudWatch rejects NaN and ±Inf
			}
			d.Value = aws.Float64(a.value)
		}
		out = append(out, d)
	}
	return out
}

// addHistogram adds one histogram series' change since the last cycle to a.
func (c *converter) addHistogram(a *agg, h *dto.Histogram, prev prevSample, seen bool, seriesKey string, next map[string]prevSample) {
	var bounds []float64
	var cum []uint64
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), +1) {
			continue // implicit: the +Inf bucket is the sample count
		}
		bounds = append(bounds, b.GetUpperBound())
		cum = append(cum, b.GetCumulativeCount())
	}
	count, sum := h.GetSampleCount(), h.GetSampleSum()
	created := createdTime(h.GetCreatedTimestamp())
	seen = seen && prev.created.Equal(created)
	next[seriesKey] = prevSample{created: created, count: count, sum: sum, buckets: cum}
	if seen && count >= prev.count && len(prev.buckets) == len(cum) {
		count -= prev.count
		sum -= prev.sum
		cum = slices.Clone(cum)
		for i := range cum {
			cum[i] -= min(prev.buckets[i], cum[i])
		}
	}
	if a.counts == nil {
		a.bounds = bounds
		a.counts = make([]uint64, len(bounds)+1)
	} else if !slices.Equal(a.bounds, bounds) {
		return // series of one family share buckets; never merge others
	}
	var below uint64
	for i, cc := range cum {
		a.counts[i] += cc - min(below, cc)
		below = cc
	}
	a.counts[len(bounds)] += count - min(below, count)
	a.count += count
	a.sum += sum
}

// estimateMinMax estimates the smallest and largest sample of a histogram
// interval from its bucket counts (counts[i] samples in (bounds[i-1],
// bounds[i]], the last in (bounds[len-1], +Inf)), n samples with sum sum.
// Samples are assumed non-negative (every sluice histogram measures a
// duration), so the first bucket's lower edge is 0.
//
// Minimum is the lower edge of the first non-empty bucket and Maximum the
// upper edge of the last, each tightened with the sum: the largest sample
// is at most sum minus the lower edges of all the others, and the smallest
// at least sum minus the upper edges of all the others. Both are exact for
// a single sample, and the +Inf bucket gets its bound from the sum alone.
// The results always satisfy Minimum ≤ Sum/SampleCount ≤ Maximum.
func estimateMinMax(bounds []float64, counts []uint64, n uint64, sum float64) (lo, hi float64) {
	lower := func(i int) float64 {
		if i == 0 {
			return 0
		}
		return bounds[i-1]
	}
	first, last := -1, -1
	var lowerSum, upperSum float64 // over every sample; upperSum over finite buckets
	for i, c := range counts {
		if c == 0 {
			continue
		}
		if first < 0 {
			first = i
		}
		last = i
		if len(bounds) > 0 {
			lowerSum += float64(c) * lower(i)
		}
		if i < len(bounds) {
			upperSum += float64(c) * bounds[i]
		}
	}
	mean := sum / float64(n)
	if first < 0 || len(bounds) == 0 {
		return mean, mean
	}
	lo = lower(first)
	hi = sum - lowerSum + lower(last) // the sum bound
	if last < len(bounds) {
		hi = min(hi, bounds[last])
	}
	// The smallest sample's sum bound needs every other sample's upper
	// edge finite: no +Inf sample other than (possibly) itself.
	infCount := counts[len(bounds)]
	if infCount == 0 || (infCount == 1 && first == len(bounds)) {
		others := upperSum
		if first < len(bounds) {
			others -= bounds[first]
		}
		lo = max(lo, sum-others)
	}
	lo = min(lo, mean)
	hi = max(hi, mean)
	return lo, hi
}

// createdTime returns a series' created timestamp, or the zero time when
// it has none (a collector that does not set it).
func createdTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
