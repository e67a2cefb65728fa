package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Never stands for a job not delivered by the end of a measurement: it
// sorts above every real dwell, so a percentile that reaches it says so.
const Never = time.Duration(math.MaxInt64)

// Percentile returns the p-th percentile (0 < p ≤ 100, nearest rank) of
// ds, which it sorts; zero for no samples.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[min(max(rank, 1), len(ds))-1]
}

// Ms formats a duration in milliseconds with sensible precision, and
// Never as "not delivered".
func Ms(d time.Duration) string {
	switch {
	case d == Never:
		return "not delivered"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// Ratio returns a/b, or NaN when b is zero.
func Ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// Window is a time bucket of samples: dwell by enqueue time, say.
type Window struct {
	Start time.Duration // since the origin
	N     int
	P50   time.Duration
	P99   time.Duration
}

// Windows buckets samples (at, value) by at − origin into windows of
// width w from lo to hi, and returns each non-empty window's percentiles.
func Windows(at []time.Time, vals []time.Duration, origin time.Time, w, lo, hi time.Duration) []Window {
	n := int((hi - lo + w - 1) / w)
	if n <= 0 {
		return nil
	}
	buckets := make([][]time.Duration, n)
	for i, t := range at {
		off := t.Sub(origin)
		if off < lo || off >= hi {
			continue
		}
		k := int((off - lo) / w)
		buckets[k] = append(buckets[k], vals[i])
	}
	var out []Window
	for k, b := range buckets {
		if len(b) == 0 {
			continue
		}
		out = append(out, Window{Start: lo + time.Duration(k)*w, N: len(b), P50: Percentile(b, 50), P99: Percentile(b, 99)})
	}
	return out
}

// median returns the middle of xs (the mean of the two middle ones for
// an even count), or 0 for none; xs is left as it was.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

// ratioList formats ratios as "0.91, 1.02, 0.97".
func ratioList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}
