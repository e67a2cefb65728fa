package console

import (
	"fmt"
	"html/template"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// laneStat sums a lane's queues.
type laneStat struct {
	Lane     string
	Waiting  int64 // visible on shards, spillover and backlog
	Delayed  int64
	InFlight int64
	Dead     int64 // in the DLQ
	Oldest   time.Duration
	Queues   []*adminv1.QueueStats
	// From the drainers' fairness view: busy slots ÷ slots while the
	// lane's jobs waited, and Jain's index (both -1 when unknown), and the
	// jobs read ahead waiting for a slot.
	Utilization, Fairness float64
	Held                  int64
	// Delivery attempts finished per second, recently (the drainers').
	Deliveries float64
}

// lanesOf groups queue stats by lane, in the order the API lists them
// (the topology's).
func lanesOf(qs []*adminv1.QueueStats) []laneStat {
	var out []laneStat
	idx := map[string]int{}
	for _, q := range qs {
		i, ok := idx[q.GetLane()]
		if !ok {
			i = len(out)
			idx[q.GetLane()] = i
			out = append(out, laneStat{Lane: q.GetLane(), Utilization: -1, Fairness: -1})
		}
		l := &out[i]
		l.Queues = append(l.Queues, q)
		if q.GetKind() == "dlq" {
			l.Dead += q.GetVisible() + q.GetInFlight() + q.GetDelayed()
			continue
		}
		l.Waiting += q.GetVisible()
		l.Delayed += q.GetDelayed()
		l.InFlight += q.GetInFlight()
		l.Oldest = max(l.Oldest, q.GetOldestAge().AsDuration())
	}
	return out
}

// withFairness adds the drainers' figures (nil when no drainer answers)
// to the lanes.
func withFairness(lanes []laneStat, f *adminv1.GetFairnessResponse) []laneStat {
	for _, lf := range f.GetLanes() {
		for i := range lanes {
			if lanes[i].Lane == lf.GetLane() {
				lanes[i].Utilization, lanes[i].Fairness, lanes[i].Held = lf.GetUtilization(), lf.GetJainIndex(), lf.GetHeld()
				lanes[i].Deliveries = lf.GetDeliveriesPerSecond()
			}
		}
	}
	return lanes
}

type sample struct {
	at    time.Time
	lanes map[string]laneStat
}

// history keeps the last n samples.
type history struct {
	mu      sync.Mutex
	n       int
	samples []sample
}

func newHistory(n int) *history { return &history{n: max(n, 2)} }

func (h *history) add(at time.Time, lanes []laneStat) {
	m := make(map[string]laneStat, len(lanes))
	for _, l := range lanes {
		l.Queues = nil
		m[l.Lane] = l
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.samples = append(h.samples, sample{at: at, lanes: m})
	if len(h.samples) > h.n {
		h.samples = h.samples[len(h.samples)-h.n:]
	}
}

func (h *history) snapshot() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sample(nil), h.samples...)
}

// Chart geometry.
const (
	chartW     = 560
	padL, padB = 44, 20
	padT       = 10
)

// line is one series of a chart; a negative value is a gap.
type line struct {
	name, class string
	value       func(laneStat) float64
}

// chartKind is what a chart plots and how its axis reads.
type chartKind struct {
	height int
	lines  []line // drawn in this order: the last is on top
	none   string // said when no line has two points
	top    func(highest float64) float64
	label  func(v float64) string
}

var (
	// counts charts jobs: waiting on top.
	counts = chartKind{
		height: 150,
		lines: []line{
			{"dead letters", "s-dead", func(l laneStat) float64 { return float64(l.Dead) }},
			{"delayed", "s-delayed", func(l laneStat) float64 { return float64(l.Delayed) }},
			{"in flight", "s-inflight", func(l laneStat) float64 { return float64(l.InFlight) }},
			{"waiting", "s-waiting", func(l laneStat) float64 { return float64(l.Waiting) }},
		},
		top:   func(h float64) float64 { return float64(niceCeil(int64(math.Ceil(h)))) },
		label: func(v float64) string { return strconv.FormatInt(int64(v), 10) },
	}
	// ratios charts utilization and the fairness index, 0 to 1.
	ratios = chartKind{
		height: 110,
		lines: []line{
			{"fairness index", "s-fair", func(l laneStat) float64 { return l.Fairness }},
			{"utilization", "s-util", func(l laneStat) float64 { return l.Utilization }},
		},
		none:  "no work waited for a slot",
		top:   func(float64) float64 { return 1 },
		label: func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) },
	}
)

// chart draws a lane's samples over the span ending now as inline SVG.
// Only numbers and fixed text go into it.
func chart(k chartKind, samples []sample, lane string, span time.Duration, now time.Time) template.HTML {
	var highest float64
	for _, s := range samples {
		for _, ln := range k.lines {
			highest = max(highest, ln.value(s.lanes[lane]))
		}
	}
	top := k.top(highest)
	plotW, plotH := float64(chartW-padL-8), float64(k.height-padT-padB)
	x := func(t time.Time) float64 {
		f := 1 - float64(now.Sub(t))/float64(span)
		return float64(padL) + max(0, min(1, f))*plotW
	}
	y := func(v float64) float64 { return float64(padT) + plotH*(1-v/top) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img">`, chartW, k.height, chartW, k.height)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-8, y(v), y(v))
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-6, y(v)+4, k.label(v))
	}
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">−%s</text>`, padL, k.height-4, shortDuration(span))
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="end">now</text>`, chartW-8, k.height-4)
	if len(samples) < 2 {
		fmt.Fprintf(&b, `<text class="empty" x="%d" y="%d" text-anchor="middle">collecting samples…</text>`, padL+int(plotW/2), padT+int(plotH/2))
	}
	drawn := false
	for _, ln := range k.lines {
		var pts []string
		flush := func() {
			if len(pts) > 1 {
				drawn = true
				fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, ln.class, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for _, s := range samples {
			l, ok := s.lanes[lane]
			v := ln.value(l)
			if !ok || v < 0 {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.at), y(v)))
		}
		flush()
	}
	if !drawn && len(samples) > 1 && k.none != "" {
		fmt.Fprintf(&b, `<text class="empty" x="%d" y="%d" text-anchor="middle">%s</text>`, padL+int(plotW/2), padT+int(plotH/2)+4, k.none)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and fixed text only
}

// niceCeil rounds v up to a chart top whose four grid steps are whole
// and round: 4, 8, 20, 40, 80, 200, …
func niceCeil(v int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{4, 8, 20} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return d.Round(time.Second).String()
}
