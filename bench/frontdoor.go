package bench

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// FrontDoorOptions configures the front-door scenario (item 1).
type FrontDoorOptions struct {
	Backend string
	// Concurrency lists the closed-loop client concurrencies of unary
	// Submit. Defaults to 16, 64, 256.
	Concurrency []int
	// Duration of each measured point, after a warmup of a tenth of it.
	// Defaults to 3s.
	Duration time.Duration
	// BatchSize is the jobs per SubmitBatch. Defaults to 100.
	BatchSize int
	// BatchConcurrency lists the SubmitBatch concurrencies. Defaults to
	// 4, 16.
	BatchConcurrency []int
	// Tenants the load is spread over. Defaults to 16.
	Tenants int
}

func (o *FrontDoorOptions) defaults() {
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{16, 64, 256}
	}
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.BatchSize == 0 {
		o.BatchSize = 100
	}
	if len(o.BatchConcurrency) == 0 {
		o.BatchConcurrency = []int{4, 16}
	}
	if o.Tenants == 0 {
		o.Tenants = 16
	}
}

// suffix distinguishes figures of the SQS backend from the embedded
// ones.
func suffix(backend string) (id, name string) {
	if backend == SQS {
		return ".sqs", " [SQS]"
	}
	return "", ""
}

// FrontDoor measures Submit/s and latency through the real gateway next to
// the bare grpc-go server with the same client in the same run, the
// latency at half the saturating load, and SubmitBatch jobs/s.
func FrontDoor(ctx context.Context, env *Env, rec *Recorder, o FrontDoorOptions, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	figs := []Figure{
		{ID: "1.unary-ratio" + sid, Item: 1, Order: 1, Name: "Front door: peak Submit/s through the gateway ÷ bare grpc-go" + sname, Goal: "≥ 0.5"},
		{ID: "1.batch-ratio" + sid, Item: 1, Order: 2, Name: "Front door: SubmitBatch jobs/s ÷ unary Submit/s" + sname, Goal: "≥ 10×"},
		{ID: "1.p99-half" + sid, Item: 1, Order: 3, Name: "Front door: Submit p99 at half the saturating load" + sname, Goal: "≤ 5 ms"},
	}
	for i := range figs {
		figs[i].Command = command
	}
	if err := frontDoor(ctx, env, rec, o, figs); err != nil {
		rec.Fail(figs, err)
		return err
	}
	return nil
}

func frontDoor(ctx context.Context, env *Env, rec *Recorder, o FrontDoorOptions, figs []Figure) error {
	tenants := NewTenants("fd", o.Tenants, Open)
	cl, err := env.StartCluster(ctx, ClusterConfig{Name: "frontdoor-" + o.Backend, Backend: o.Backend, Tenants: tenants})
	if err != nil {
		return err
	}
	defer cl.Close()
	dir, err := env.Dir("bare")
	if err != nil {
		return err
	}
	bare, err := env.Start(dir, "bare", env.BareCmd[0], append(env.BareCmd[1:], "--listen", "127.0.0.1:0")...)
	if err != nil {
		return err
	}
	defer func() { _ = bare.Stop(10 * time.Second) }()
	bareAddr, err := bare.Addr(ctx, "bare server listening")
	if err != nil {
		return err
	}
	gw, err := Dial(cl.Addr)
	if err != nil {
		return err
	}
	defer gw.Close()
	bc, err := Dial(bareAddr)
	if err != nil {
		return err
	}
	defer bc.Close()
	targets := []struct {
		name string
		c    *Client
	}{{"gateway", gw}, {"bare grpc-go", bc}}

	unary := func(c *Client) Call {
		return func(ctx context.Context, w, i int) (int, error) {
			return 1, c.Submit(ctx, tenants[(w+i)%len(tenants)])
		}
	}
	batch := func(c *Client) Call {
		return func(ctx context.Context, w, i int) (int, error) {
			return c.SubmitBatch(ctx, tenants[(w+i)%len(tenants)], o.BatchSize)
		}
	}
	warm := o.Duration / 10
	var rows [][]string
	peak := map[string]float64{}
	peakConc := map[string]int{}
	for _, conc := range o.Concurrency {
		for _, t := range targets {
			r := ClosedLoop(ctx, conc, warm, o.Duration, unary(t.c))
			if r.OK == 0 {
				return fmt.Errorf("%s at concurrency %d: no call succeeded: %w", t.name, conc, r.FirstErr)
			}
			rows = append(rows, []string{"Submit", t.name, fmt.Sprint(conc), Num(r.Rate()), Ms(Percentile(r.Latencies, 50)), Ms(Percentile(r.Latencies, 99)), errCell(r.Errors, r.FirstErr)})
			env.Logf("  Submit %-13s concurrency %4d: %8s calls/s p50 %s p99 %s", t.name, conc, Num(r.Rate()), Ms(Percentile(r.Latencies, 50)), Ms(Percentile(r.Latencies, 99)))
			if r.Rate() > peak[t.name] {
				peak[t.name], peakConc[t.name] = r.Rate(), conc
			}
		}
	}
	// Open loop at half the gateway's saturating rate, spread over 8
	// streams (tenants); the bare server gets the same schedule.
	half := peak["gateway"] / 2
	var halfRows [][]string
	var gwP99 time.Duration
	for _, t := range targets {
		var next atomic.Int64
		streams := make([]Stream, 8)
		for i := range streams {
			streams[i] = Stream{Rate: half / 8, Call: func(ctx context.Context) error {
				return t.c.Submit(ctx, tenants[int(next.Add(1))%len(tenants)])
			}}
		}
		r := Paced(ctx, streams, o.Duration, 1024)
		p50, p99 := Percentile(r.Latencies, 50), Percentile(r.Latencies, 99)
		if t.c == gw {
			gwP99 = p99
		}
		halfRows = append(halfRows, []string{t.name, Num(half), Num(float64(r.Sent) / o.Duration.Seconds()), Ms(p50), Ms(p99), errCell(int(r.Errors), r.FirstErr), fmt.Sprint(r.Late)})
		env.Logf("  open loop %s at %s/s: p50 %s p99 %s (late starts %d)", t.name, Num(half), Ms(p50), Ms(p99), r.Late)
	}

	var batchPeak float64
	for _, conc := range o.BatchConcurrency {
		for _, t := range targets {
			r := ClosedLoop(ctx, conc, warm, o.Duration, batch(t.c))
			rows = append(rows, []string{fmt.Sprintf("SubmitBatch ×%d", o.BatchSize), t.name, fmt.Sprint(conc), Num(r.UnitRate()) + " jobs/s", Ms(Percentile(r.Latencies, 50)), Ms(Percentile(r.Latencies, 99)), errCell(r.Errors, r.FirstErr)})
			env.Logf("  SubmitBatch %-13s concurrency %4d: %8s jobs/s", t.name, conc, Num(r.UnitRate()))
			if t.c == gw && r.UnitRate() > batchPeak {
				batchPeak = r.UnitRate()
			}
		}
	}

	ratio := peak["gateway"] / peak["bare grpc-go"]
	f := figs[0]
	f.Measured = fmt.Sprintf("%.2f (%s vs %s Submit/s, best of concurrency %s)", ratio, Num(peak["gateway"]), Num(peak["bare grpc-go"]), joinInts(o.Concurrency))
	f.Status = AtLeast(ratio, 0.5)
	rec.Add(f)
	br := batchPeak / peak["gateway"]
	f = figs[1]
	f.Measured = fmt.Sprintf("%.1f× (%s jobs/s in batches of %d vs %s Submit/s)", br, Num(batchPeak), o.BatchSize, Num(peak["gateway"]))
	f.Status = AtLeast(br, 10)
	rec.Add(f)
	f = figs[2]
	f.Measured = fmt.Sprintf("%s at %s Submit/s (saturation %s/s at concurrency %d)", Ms(gwP99), Num(half), Num(peak["gateway"]), peakConc["gateway"])
	f.Status = AtMost(gwP99.Seconds()*1000, 5)
	rec.Add(f)

	sid, sname := suffix(o.Backend)
	body := fmt.Sprintf("Closed loop, one client connection, %d tenants, %d-byte payloads, %s per point after a %s warmup; "+
		"gateway on the %s backend without drainers (auth, bucket, router, durable enqueue).\n\n%s\n"+
		"Open loop at half the gateway's saturating rate (8 paced streams, latency from each call's start):\n\n%s",
		o.Tenants, PayloadBytes, o.Duration, warm, o.Backend,
		Table([]string{"call", "server", "concurrency", "calls/s", "p50", "p99", "errors"}, rows),
		Table([]string{"server", "target/s", "sent/s", "p50", "p99", "errors", "late starts"}, halfRows))
	rec.Detail("frontdoor"+sid, 1, "1. Front door"+sname, body)
	return nil
}

func errCell(n int, first error) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, strings.ReplaceAll(firstLine(first.Error()), "|", "/"))
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, "/")
}
