package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

func TestParseGoBench(t *testing.T) {
	t.Parallel()
	out := `goos: linux
pkg: github.com/sluice-dev/sluice/gateway
BenchmarkAdmissionMemory/gcra-2         	       1	4489330788 ns/op	        99.79 B/tenant
BenchmarkAdmissionDecision/rate.Limiter-2         	 5511733	      2617 ns/op	      2617 ns/decision
BenchmarkEmbedded/receive+delete/batch=10/consumers=8-2         	     187	   9522785 ns/op	      1050 jobs/s
BenchmarkNoProcs 	 100	 12 ns/op
PASS
ok  	github.com/sluice-dev/sluice/gateway	27.613s`
	got := ParseGoBench(out)
	want := []BenchResult{
		{"BenchmarkAdmissionMemory/gcra", map[string]float64{"ns/op": 4489330788, "B/tenant": 99.79}},
		{"BenchmarkAdmissionDecision/rate.Limiter", map[string]float64{"ns/op": 2617, "ns/decision": 2617}},
		{"BenchmarkEmbedded/receive+delete/batch=10/consumers=8", map[string]float64{"ns/op": 9522785, "jobs/s": 1050}},
		{"BenchmarkNoProcs", map[string]float64{"ns/op": 12}},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d results, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Name != want[i].Name {
			t.Errorf("result %d: name %q, want %q", i, got[i].Name, want[i].Name)
		}
		for unit, v := range want[i].Metrics {
			if got[i].Metrics[unit] != v {
				t.Errorf("%s: %s = %v, want %v", want[i].Name, unit, got[i].Metrics[unit], v)
			}
		}
	}
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	page := `# HELP sluice_backend_calls_total Queue backend API requests.
# TYPE sluice_backend_calls_total counter
sluice_backend_calls_total{operation="ReceiveMessage"} 120
sluice_backend_calls_total{operation="SendMessageBatch"} 1.5e+03
go_goroutines 42
broken{line 1
`
	s := ParseMetrics(page)
	calls := ByLabel(s, "sluice_backend_calls_total", "operation")
	if calls["ReceiveMessage"] != 120 || calls["SendMessageBatch"] != 1500 || len(calls) != 2 {
		t.Errorf("calls = %v, want ReceiveMessage 120, SendMessageBatch 1500", calls)
	}
	if g := ByLabel(s, "go_goroutines", ""); g[""] != 42 {
		t.Errorf("go_goroutines = %v, want 42", g)
	}
}

func TestStoreWrites(t *testing.T) {
	t.Parallel()
	page := `sluice_store_write_seconds_bucket{le="0.005"} 90
sluice_store_write_seconds_bucket{le="0.01"} 99
sluice_store_write_seconds_bucket{le="0.05"} 99
sluice_store_write_seconds_bucket{le="0.1"} 100
sluice_store_write_seconds_bucket{le="+Inf"} 100
sluice_store_write_seconds_count 100
sluice_store_write_operations_total 1250
`
	want := "store writes 100 (12.5 operations each), p99 ≤ 10ms, 1 over 50 ms"
	if got := storeWrites(ParseMetrics(page)); got != want {
		t.Errorf("storeWrites = %q, want %q", got, want)
	}
	if got := storeWrites(ParseMetrics("go_goroutines 42\n")); got != "" {
		t.Errorf("storeWrites without a store = %q, want empty", got)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name string
		give []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 99, 0},
		{"one", ms(7), 50, 7 * time.Millisecond},
		{"median of 4", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(seq(100)...), 99, 99 * time.Millisecond},
		{"p100", ms(5, 9, 1), 100, 9 * time.Millisecond},
		{"undelivered sorts last", append(ms(1, 2, 3), Never), 99, Never},
	}
	for _, tt := range tests {
		if got := Percentile(tt.give, tt.p); got != tt.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i + 1
	}
	return s
}

func TestWindowsAndDwellSeries(t *testing.T) {
	t.Parallel()
	origin := time.Unix(1000, 0)
	jobs := []Outcome{
		{Sent: Sent{At: origin.Add(100 * time.Millisecond)}, Delivered: true, Dwell: 10 * time.Millisecond},
		{Sent: Sent{At: origin.Add(900 * time.Millisecond)}, Delivered: true, Dwell: 30 * time.Millisecond},
		{Sent: Sent{At: origin.Add(1500 * time.Millisecond)}, Dwell: Never},           // still waiting at end
		{Sent: Sent{At: origin.Add(-time.Second)}, Delivered: true, Dwell: time.Hour}, // before the range
	}
	end := origin.Add(4 * time.Second)
	x, y := DwellSeries(jobs, origin, end, time.Second, 0, 3*time.Second)
	wantX, wantY := []float64{0.5, 1.5}, []float64{30, 2500}
	if len(x) != 2 || x[0] != wantX[0] || x[1] != wantX[1] || y[0] != wantY[0] || y[1] != wantY[1] {
		t.Errorf("DwellSeries = %v, %v; want %v, %v", x, y, wantX, wantY)
	}
	if n := Undelivered(jobs); n != 1 {
		t.Errorf("Undelivered = %d, want 1", n)
	}
}

func TestJoin(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	sent := []Sent{{ID: "a", Tenant: "x", At: t0}, {ID: "b", Tenant: "x", At: t0}}
	got := Join(sent, []Delivery{{JobID: "b", Enqueued: t0, Start: t0.Add(5 * time.Millisecond)}, {JobID: "other"}})
	if got[0].Delivered || got[0].Dwell != Never {
		t.Errorf("job a = %+v, want undelivered", got[0])
	}
	if !got[1].Delivered || got[1].Dwell != 5*time.Millisecond {
		t.Errorf("job b = %+v, want delivered after 5ms", got[1])
	}
}

// TestConfigFiles checks that the files the harness writes are what the
// binaries accept: the tenant and topology packages load them.
func TestConfigFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ts := NewTenants("quiet", 3, Tenant{SubmitRate: 200, SubmitBurst: 200, DrainRate: 2.5, DrainBurst: 3, MaxInFlight: 4, Weight: 3})
	ts = append(ts, NewTenants("open", 1, Open)...)
	path := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(path, []byte(TenantsFile(ts)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := tenant.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := cfg.Authenticate(ts[1].Key)
	if !ok || got.ID != ts[1].ID {
		t.Fatalf("key of %s authenticates as %v, %v", ts[1].ID, got, ok)
	}
	if l := got.Limits; l.SubmitRate != 200 || l.DrainRate != 2.5 || l.DrainBurst != 3 || l.MaxInFlight != 4 || l.Weight != 3 || l.Lane != "standard" {
		t.Errorf("limits = %+v", l)
	}
	if open, _ := cfg.Authenticate(ts[3].Key); open == nil || open.Limits.SubmitRate != Open.SubmitRate {
		t.Errorf("open tenant = %+v", open)
	}

	for _, tt := range []struct {
		fifo                 bool
		shards, shardChoices int
	}{{false, 4, 2}, {true, 1, 1}} {
		p := filepath.Join(dir, "queues.yaml")
		queues, err := TopologyFile(Lane("bx", 4, tt.fifo, topology.Duration(2*time.Second)))
		if err == nil {
			err = os.WriteFile(p, []byte(queues), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		topo, err := topology.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		l, ok := topo.Lane("standard")
		if !ok || l.Shards != tt.shards || l.ShardChoices != tt.shardChoices || time.Duration(l.StalenessBound) != 2*time.Second {
			t.Errorf("fifo %v: lane = %+v, want %d shards, %d choices, 2s staleness", tt.fifo, l, tt.shards, tt.shardChoices)
		}
	}
}

func TestChartSVG(t *testing.T) {
	t.Parallel()
	for _, logY := range []bool{false, true} {
		c := Chart{
			Title: "dwell <&>", XLabel: "s", YLabel: "ms", LogY: logY,
			Series: []Series{
				{Name: "a", X: []float64{0, 1, 2}, Y: []float64{1, 10, 1000}},
				{Name: "b", Dashed: true, X: []float64{0.5, 1.5}, Y: []float64{0, 5}},
			},
			Marks:  []Mark{{X: 1, Label: "restart"}},
			Bands:  []Band{{From: 0, To: 1, Label: "stopped"}},
			HLines: []Mark{{X: 20, Label: "goal"}},
		}
		svg := c.SVG()
		dec := xml.NewDecoder(bytes.NewReader(svg))
		lines := 0
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("logY %v: invalid SVG: %v\n%s", logY, err, svg)
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
				lines++
			}
		}
		if lines != 2 {
			t.Errorf("logY %v: %d polylines, want 2", logY, lines)
		}
		if s := string(svg); strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
			t.Errorf("logY %v: SVG has NaN or Inf coordinates", logY)
		}
	}
	// An empty chart still renders.
	if _, err := xml.NewDecoder(bytes.NewReader(Chart{}.SVG())).Token(); err != nil {
		t.Errorf("empty chart: %v", err)
	}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	r := &Results{Figures: map[string]Figure{
		"2.b": {ID: "2.b", Item: 2, Name: "second", Goal: "≤ 1.5×", Measured: "1.2× | ok", Status: Meets, Command: "go run x"},
		"1.a": {ID: "1.a", Item: 1, Name: "first", Goal: "≥ 0.5", Measured: "0.4", Status: Misses, Command: "go run y"},
		"5.c": {ID: "5.c", Item: 5, Name: "third", Measured: "n", Status: NotMeasured},
	}, Details: map[string]Detail{"x": {Item: 1, Title: "1. Front door", Body: "table"}}}
	md := r.Markdown("# Benchmarks\n")
	first, second := strings.Index(md, "| 1 | first"), strings.Index(md, "| 2 | second")
	if first < 0 || second < first || !strings.Contains(md, "| 5 | third") {
		t.Errorf("figures missing or out of order:\n%s", md)
	}
	for _, want := range []string{"✅ meets", "❌ misses", `1.2× \| ok`, "### 1. Front door", "`go run x`"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := r.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadResults(path)
	if err != nil || len(back.Figures) != 3 || back.Figures["1.a"].Measured != "0.4" {
		t.Errorf("LoadResults = %+v, %v", back, err)
	}
	if empty, err := LoadResults(filepath.Join(t.TempDir(), "none.json")); err != nil || len(empty.Figures) != 0 {
		t.Errorf("LoadResults of a missing file = %+v, %v", empty, err)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		got, want string
	}{
		{AtLeast(0.5, 0.5), Meets},
		{AtLeast(0.49, 0.5), Misses},
		{AtLeast(math.NaN(), 1), NotMeasured},
		{AtMost(5, 5), Meets},
		{AtMost(5.1, 5), Misses},
		{AtMost(math.NaN(), 1), NotMeasured},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: %s, want %s", i, tt.got, tt.want)
		}
	}
	for give, want := range map[float64]string{1234567: "1,234,567", 99.5: "99.5", 0.256: "0.26", -1500: "-1,500", 0: "0"} {
		if got := Num(give); got != want {
			t.Errorf("Num(%v) = %q, want %q", give, got, want)
		}
	}
}

// TestLoadAgainstBareServer drives the bare server (a real gRPC server on
// loopback) with both load shapes the scenarios use.
func TestLoadAgainstBareServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var logw bytes.Buffer
	errc := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() { errc <- ServeBare(ctx, "127.0.0.1:0", pw) }()
	line := make([]byte, 256)
	n, err := pr.Read(line)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(&logw, pr) }()
	addr := string(line[:n])
	addr = addr[strings.Index(addr, `"addr":"`)+8:]
	addr = addr[:strings.IndexByte(addr, '"')]
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("ServeBare: %v", err)
		}
		pw.Close()
	})
	c, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ten := NewTenants("t", 1, Open)[0]
	r := ClosedLoop(ctx, 4, 50*time.Millisecond, 200*time.Millisecond, func(ctx context.Context, _, _ int) (int, error) {
		return c.SubmitBatch(ctx, ten, 10)
	})
	if r.OK == 0 || r.Errors != 0 || r.Units != 10*r.OK || len(r.Latencies) != r.OK {
		t.Errorf("closed loop: %+v (first error %v)", r, r.FirstErr)
	}
	var tr Tracker
	p := Paced(ctx, []Stream{tr.Stream(c, ten, 200), tr.Stream(c, ten, 100)}, 300*time.Millisecond, 16)
	if p.Errors != 0 || p.Sent < 80 || p.Sent > 92 || len(tr.Jobs()) != int(p.Sent) {
		t.Errorf("paced: sent %d (want 90 ± 10), %d errors (%v), %d tracked", p.Sent, p.Errors, p.FirstErr, len(tr.Jobs()))
	}
}

func TestRecoveryJudge(t *testing.T) {
	t.Parallel()
	restart := time.Unix(1000, 0)
	// jobs returns one job per 100ms from -1s to until, with dwell(t).
	jobs := func(until time.Duration, dwell func(at time.Duration) time.Duration) []Outcome {
		var out []Outcome
		for at := -time.Second; at < until; at += 100 * time.Millisecond {
			d := dwell(at)
			out = append(out, Outcome{Sent: Sent{At: restart.Add(at)}, Delivered: true, Start: restart.Add(at + d), Dwell: d})
		}
		return out
	}
	r := recRun{restartAt: restart, threshold: 50 * time.Millisecond}
	tests := []struct {
		name          string
		until         time.Duration
		dwell         func(time.Duration) time.Duration
		wantRecovered time.Duration
	}{
		{"at once", 6 * time.Second, func(time.Duration) time.Duration { return 10 * time.Millisecond }, 0},
		{"after a backlog, with a later spike", 10 * time.Second, func(at time.Duration) time.Duration {
			switch {
			case at < 2*time.Second, at >= 6*time.Second && at < 6100*time.Millisecond:
				return time.Second
			}
			return 10 * time.Millisecond
		}, 2 * time.Second},
		{"never", 6 * time.Second, func(time.Duration) time.Duration { return time.Second }, -1},
		{"too late to tell", 3 * time.Second, func(at time.Duration) time.Duration {
			if at < 2*time.Second {
				return time.Second
			}
			return 10 * time.Millisecond
		}, -1},
	}
	for _, tt := range tests {
		js := jobs(tt.until, tt.dwell)
		done, got := r.judge(js, 500*time.Millisecond, restart.Add(tt.until))
		if got != tt.wantRecovered {
			t.Errorf("%s: recovered %v, want %v", tt.name, got, tt.wantRecovered)
		}
		if done < 0 {
			t.Errorf("%s: backlog not done, want done (every job delivered)", tt.name)
		}
	}
}

func TestShellJoin(t *testing.T) {
	t.Parallel()
	got := shellJoin([]string{"go", "test", "-run", "^$", "-bench", "Admission|Embedded", "it's"})
	want := `go test -run '^$' -bench 'Admission|Embedded' 'it'\''s'`
	if got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

// TestEnqueueFigureDurableSameMode checks that item 7's "durable enqueue"
// figure is taken from the fsync=always runs only, and that its
// single-writer context is the same mode's, not the fastest of any mode,
// and that the single sends' latency in each mode comes with it.
func TestEnqueueFigureDurableSameMode(t *testing.T) {
	t.Parallel()
	out := `BenchmarkEmbedded/fsync=always/send/1KiB/concurrency=1-2     1	224497 ns/op	 4454 jobs/s
BenchmarkEmbedded/fsync=always/send/1KiB/concurrency=256-2   1	24817 ns/op	 40294 jobs/s
BenchmarkEmbedded/fsync=interval/send/1KiB/concurrency=1-2   1	54236 ns/op	 18438 jobs/s
BenchmarkEmbedded/fsync=interval/send/1KiB/concurrency=256-2 1	20000 ns/op	 50000 jobs/s
BenchmarkEmbeddedSendLatency/fsync=always-2   47514	 25048 ns/op	 272.0 p50-µs	 4352 p99-µs	 9291 p99.9-µs	 39924 sent/s
BenchmarkEmbeddedSendLatency/fsync=interval-2 47191	 25060 ns/op	 151.0 p50-µs	 2266 p99-µs	 4503 p99.9-µs	 39904 sent/s
`
	f := enqueueFigure(Figure{}, ParseGoBench(out))
	want := "40,294 jobs/s (BenchmarkEmbedded/fsync=always/send/1KiB/concurrency=256); one writer, same run: 4,454 jobs/s" +
		"; single sends offered at 40,000/s, same run: fsync=always p50 0.27 ms, p99 4.35 ms; fsync=interval p50 0.15 ms, p99 2.27 ms"
	if f.Measured != want || f.Status != Meets {
		t.Errorf("enqueue figure = %q (%s), want %q (meets)", f.Measured, f.Status, want)
	}
}

// TestQuietFigureReferenceNotDelivered checks that a reference run whose
// quiet p99 is "not delivered" does not make the noisy run's ratio tiny
// (and the figure "meets"): the ratio is not measured.
func TestQuietFigureReferenceNotDelivered(t *testing.T) {
	t.Parallel()
	quiet := func(dwells ...time.Duration) []Outcome {
		var os []Outcome
		for _, d := range dwells {
			os = append(os, Outcome{Delivered: d != Never, Dwell: d})
		}
		return os
	}
	cases := []fairCase{{label: "no noise", group: "q", ref: true}, {label: "3 noisy", group: "q"}}
	fr := fairResults{set: fairSet{cases: cases}, runs: map[bool][]fairRun{}}
	for _, fifo := range []bool{false, true} {
		fr.runs[fifo] = []fairRun{
			{fifo: fifo, c: cases[0], quiet: quiet(time.Millisecond, Never)},                  // reference: half undelivered
			{fifo: fifo, c: cases[1], quiet: quiet(30*time.Millisecond, 30*time.Millisecond)}, // noisy run
		}
	}
	f := quietFigure(Figure{}, fr, 1, 1.5)
	if f.Status != NotMeasured {
		t.Errorf("quiet figure against an undelivered reference: %s (%s), want %s", f.Status, f.Measured, NotMeasured)
	}
	if r := durRatio(30*time.Millisecond, Never); !math.IsNaN(r) {
		t.Errorf("durRatio(30ms, Never) = %v, want NaN", r)
	}
	if r := durRatio(Never, time.Millisecond); !math.IsInf(r, 1) {
		t.Errorf("durRatio(Never, 1ms) = %v, want +Inf", r)
	}
}

func p99(d time.Duration, _ int) time.Duration { return d }

// TestRecoveryBaselineCountsUndelivered checks that the steady-state
// baseline leaves out no job submitted before the stop: one that was not
// delivered by then counts with the time it had waited.
func TestRecoveryBaselineCountsUndelivered(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	stop := t0.Add(10 * time.Second)
	var jobs []Outcome
	for i := range 97 {
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		jobs = append(jobs, Outcome{Sent: Sent{At: at}, Delivered: true, Start: at.Add(2 * time.Millisecond), Dwell: 2 * time.Millisecond})
	}
	// Three jobs stuck from 5 s before the stop, not delivered by then.
	stuck := t0.Add(5 * time.Second)
	for range 3 {
		jobs = append(jobs, Outcome{Sent: Sent{At: stuck}, Dwell: Never})
	}
	// Before the window, and after the stop: not judged.
	jobs = append(jobs, Outcome{Sent: Sent{At: t0.Add(-time.Second)}, Dwell: Never}, Outcome{Sent: Sent{At: stop}, Dwell: Never})
	if got, want := p99(baseline(jobs, t0, stop)), 5*time.Second; got != want {
		t.Errorf("baseline p99 = %v, want %v (the stuck jobs' wait until the stop)", got, want)
	}
	// A job in flight at the stop, delivered after the restart: what it
	// had waited at the stop, not the outage.
	inFlight := stop.Add(-time.Millisecond)
	late := []Outcome{{Sent: Sent{At: inFlight}, Delivered: true, Start: inFlight.Add(20 * time.Second), Dwell: 20 * time.Second}}
	if got, want := p99(baseline(late, t0, stop)), time.Millisecond; got != want {
		t.Errorf("baseline of a job delivered after the stop = %v, want %v", got, want)
	}
	if got, n := baseline(nil, t0, stop); got != 0 || n != 0 {
		t.Errorf("baseline of no jobs = %v of %d jobs, want 0 of 0", got, n)
	}
}

// TestLoadCallsBounded checks that a call that never returns by itself
// (a Submit waiting for a server that died) fails after the call timeout
// instead of hanging the load run.
func TestLoadCallsBounded(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stuck := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	done := make(chan struct{})
	var closed LoadResult
	var open *PacedResult
	go func() {
		defer close(done)
		closed = closedLoop(ctx, 2, 0, 50*time.Millisecond, 100*time.Millisecond, func(ctx context.Context, _, _ int) (int, error) {
			return 0, stuck(ctx)
		})
		open = paced(ctx, []Stream{{Rate: 100, Call: stuck}}, 50*time.Millisecond, 16, 100*time.Millisecond)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cancel() // unblocks the closed loop; the paced calls ignore it
		t.Fatal("load run with calls that never return did not end within 5s")
	}
	if closed.Errors == 0 || !errors.Is(closed.FirstErr, context.DeadlineExceeded) {
		t.Errorf("closed loop: %d errors (%v), want deadline exceeded", closed.Errors, closed.FirstErr)
	}
	if open.Errors == 0 || open.Errors != open.Sent || !errors.Is(open.FirstErr, context.DeadlineExceeded) {
		t.Errorf("paced: %d of %d calls failed (%v), want all, deadline exceeded", open.Errors, open.Sent, open.FirstErr)
	}
}

// TestRecoverySteadyFigureWindow checks that the steady-state figure
// names the window its baseline p99 is of: the baseline time without its
// first second, which the baseline leaves out.
func TestRecoverySteadyFigureWindow(t *testing.T) {
	t.Parallel()
	o := RecoveryOptions{}
	o.defaults()
	s, f := recRun{baseP99: 3 * time.Millisecond, baseJobs: 2100}, recRun{fifo: true, baseP99: 2 * time.Millisecond, baseJobs: 2100}
	fig := steadyFigure(Figure{}, s, f, o)
	want := "1.50× (p99 dwell of the jobs submitted in the 7s before the outage, after the load's first 1s: sluice 3.00 ms, FIFO 2.00 ms)"
	if fig.Measured != want || fig.Status != Misses {
		t.Errorf("steady figure = %q (%s), want %q (misses)", fig.Measured, fig.Status, want)
	}
}

// TestFrontDoorRatiosWithoutBatch checks that the ratios over SubmitBatch
// jobs/s are not measured when no SubmitBatch call succeeded, instead of
// an infinite ratio that meets its goal.
func TestFrontDoorRatiosWithoutBatch(t *testing.T) {
	t.Parallel()
	o := FrontDoorOptions{}
	o.defaults()
	prod := LoadResult{OK: 1000, Units: 1000, Elapsed: time.Second}
	f := producerFigure(Figure{}, prod, prod, 0, 0, o)
	if f.Status != NotMeasured {
		t.Errorf("producer figure without a SubmitBatch rate: %s (%s), want %s", f.Status, f.Measured, NotMeasured)
	}
}

// TestFairnessPlotGoalLine checks that a fairness plot's goal line is the
// figure's goal × the reference p99, and names the run it came from.
func TestFairnessPlotGoalLine(t *testing.T) {
	t.Parallel()
	o := FairnessOptions{}
	o.defaults()
	quiet := func(d time.Duration) []Outcome { return []Outcome{{Delivered: true, Dwell: d}} }
	cases := []fairCase{{label: "no noise", group: "q", ref: true}, {label: "3 noisy", group: "q"}}
	fr := fairResults{set: fairSet{cases: cases}, runs: map[bool][]fairRun{
		false: {{c: cases[0], quiet: quiet(12 * time.Millisecond)}, {c: cases[1], quiet: quiet(40 * time.Millisecond)}},
		true:  {{fifo: true, c: cases[0], quiet: quiet(10 * time.Millisecond)}, {fifo: true, c: cases[1], quiet: quiet(time.Second)}},
	}}
	c := fr.chart(o, 1, "starved", 3)
	if len(c.HLines) != 1 {
		t.Fatalf("%d goal lines, want 1", len(c.HLines))
	}
	h := c.HLines[0]
	if want := "goal: 3 × the quiet p99 without noise (FIFO's run)"; h.X != 30 || h.Label != want {
		t.Errorf("goal line at %v ms %q, want 30 ms %q", h.X, h.Label, want)
	}
}

// TestRatiosOfEmptySets checks that a dwell percentile of no jobs at all
// (every submit refused, say: Percentile's zero) is not divided into a
// 0.00× ratio that meets its goal: the figure is not measured.
func TestRatiosOfEmptySets(t *testing.T) {
	t.Parallel()
	ok := []Outcome{{Delivered: true, Dwell: 3 * time.Millisecond}}
	cases := []fairCase{{label: "no noise", group: "q", ref: true}, {label: "3 noisy", group: "q"}}
	fr := fairResults{set: fairSet{cases: cases}, runs: map[bool][]fairRun{}}
	for _, fifo := range []bool{false, true} {
		fr.runs[fifo] = []fairRun{{fifo: fifo, c: cases[0], quiet: ok}, {fifo: fifo, c: cases[1], quiet: nil, errs: 1440}}
	}
	if f := quietFigure(Figure{}, fr, 1, 1.5); f.Status != NotMeasured {
		t.Errorf("quiet figure without quiet jobs: %s (%s), want %s", f.Status, f.Measured, NotMeasured)
	}
	o := RecoveryOptions{}
	o.defaults()
	s, f := recRun{}, recRun{fifo: true, baseP99: 2 * time.Millisecond, baseJobs: 2100}
	if fig := steadyFigure(Figure{}, s, f, o); fig.Status != NotMeasured {
		t.Errorf("steady figure without sluice baseline jobs: %s (%s), want %s", fig.Status, fig.Measured, NotMeasured)
	}
}

// TestUtilizationOfOffered checks that utilization divides by the load
// offered (every submit, refused or not), not only the accepted part: a
// gateway refusing most of the load must not make idle workers look
// fully used.
func TestUtilizationOfOffered(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	r := fairRun{start: start, dur: 10 * time.Second, accepted: 1000, errs: 5000}
	for i := range 1000 { // 100/s delivered during the load
		r.ds = append(r.ds, Delivery{Start: start.Add(time.Duration(i) * 10 * time.Millisecond)})
	}
	if got := r.utilization(400); math.Abs(got-0.25) > 1e-9 {
		t.Errorf("utilization = %v, want 0.25 (100/s ÷ min(400, 600/s offered))", got)
	}
}

// TestBothStatus checks the status of a figure with two goals: a miss of
// either is a miss, even when the other could not be measured.
func TestBothStatus(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ a, b, want string }{
		{Meets, Meets, Meets},
		{Misses, Meets, Misses},
		{Meets, Misses, Misses},
		{Misses, NotMeasured, Misses},
		{NotMeasured, Misses, Misses},
		{NotMeasured, Meets, NotMeasured},
		{Meets, NotMeasured, NotMeasured},
	} {
		if got := bothStatus(tt.a, tt.b); got != tt.want {
			t.Errorf("bothStatus(%s, %s) = %s, want %s", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{0.8}, 0.8},
		{[]float64{1.1, 0.75, 0.9}, 0.9},
		{[]float64{1, 0.5, 0.9, 0.7}, 0.8},
	} {
		in := slices.Clone(tt.in)
		if got := median(in); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		if !slices.Equal(in, tt.in) {
			t.Errorf("median reordered its input: %v, was %v", in, tt.in)
		}
	}
	if got, want := ratioList([]float64{0.912, 1.0}), "0.91, 1.00"; got != want {
		t.Errorf("ratioList = %q, want %q", got, want)
	}
}

func TestP99Ratios(t *testing.T) {
	ms := time.Millisecond
	// A stall in the gateway's second turn decides its whole-run p99;
	// the median of the rounds' ratios is that of the other rounds.
	gw := []time.Duration{4 * ms, 30 * ms, 5 * ms}
	bare := []time.Duration{2 * ms, 2 * ms, 2 * ms, 9 * ms}
	got := p99Ratios(gw, bare)
	if want := []float64{2, 15, 2.5}; !slices.Equal(got, want) {
		t.Fatalf("p99Ratios = %v, want %v (one per round both ran)", got, want)
	}
	if m := median(got); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}
