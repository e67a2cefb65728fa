package console

import (
	"fmt"
	"html/template"
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
			out = append(out, laneStat{Lane: q.GetLane()})
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
	chartW, chartH = 560, 150
	padL, padB     = 44, 20
	padT           = 10
)

// series is one line of a chart.
// They are drawn in this order, so waiting jobs are on top.
var series = []struct {
	name, class string
	value       func(laneStat) int64
}{
	{"dead letters", "s-dead", func(l laneStat) int64 { return l.Dead }},
	{"delayed", "s-delayed", func(l laneStat) int64 { return l.Delayed }},
	{"in flight", "s-inflight", func(l laneStat) int64 { return l.InFlight }},
	{"waiting", "s-waiting", func(l laneStat) int64 { return l.Waiting }},
}

// chart draws a lane's samples over the span ending now as inline SVG.
// Only numbers and fixed text go into it.
func chart(samples []sample, lane string, span time.Duration, now time.Time) template.HTML {
	var top int64 = 1
	for _, s := range samples {
		for _, se := range series {
			top = max(top, se.value(s.lanes[lane]))
		}
	}
	top = niceCeil(top)
	plotW, plotH := float64(chartW-padL-8), float64(chartH-padT-padB)
	x := func(t time.Time) float64 {
		f := 1 - float64(now.Sub(t))/float64(span)
		return float64(padL) + max(0, min(1, f))*plotW
	}
	y := func(v int64) float64 { return float64(padT) + plotH*(1-float64(v)/float64(top)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img">`, chartW, chartH, chartW, chartH)
	for i := 0; i <= 4; i++ {
		v := top * int64(i) / 4
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-8, y(v), y(v))
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%d</text>`, padL-6, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">−%s</text>`, padL, chartH-4, shortDuration(span))
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="end">now</text>`, chartW-8, chartH-4)
	if len(samples) < 2 {
		fmt.Fprintf(&b, `<text class="empty" x="%d" y="%d" text-anchor="middle">collecting samples…</text>`, padL+int(plotW/2), padT+int(plotH/2))
	}
	for _, se := range series {
		var pts []string
		for _, s := range samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.at), y(se.value(s.lanes[lane]))))
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, se.class, strings.Join(pts, " "))
		}
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
