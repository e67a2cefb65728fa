package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
)

// CostOptions configures the cost scenario (item 4).
type CostOptions struct {
	// Tenants share Rate jobs/s of unary Submits. Defaults: 10, 500/s.
	Tenants int
	Rate    float64
	// Warmup before the measured Window. Defaults: 10s and 30s.
	Warmup, Window time.Duration
	// Concurrency is the drainer's. Defaults to 32; the worker is a no-op.
	Concurrency int
	// SendLinger is the processes' --sqs-send-linger in a second run,
	// beside the default's, to show what fuller send batches cost in
	// Submit latency. Defaults to 20ms.
	SendLinger time.Duration
}

func (o *CostOptions) defaults() {
	o.Tenants = cmp.Or(o.Tenants, 10)
	o.Rate = cmp.Or(o.Rate, 500)
	o.Warmup = cmp.Or(o.Warmup, 10*time.Second)
	o.Window = cmp.Or(o.Window, 30*time.Second)
	o.Concurrency = cmp.Or(o.Concurrency, 32)
	o.SendLinger = cmp.Or(o.SendLinger, 20*time.Millisecond)
}

// callSnapshot is a process's backend call counters at one instant.
type callSnapshot struct {
	at    time.Time
	calls map[string]float64
}

// alignedCalls scrapes addr until the backend call counters change and
// returns the new values. The processes publish their SQS client's counts
// every few seconds, so a snapshot taken just after a change covers the
// calls up to that instant.
func alignedCalls(ctx context.Context, addr string, timeout time.Duration) (callSnapshot, error) {
	total := func(m map[string]float64) (t float64) {
		for _, v := range m {
			t += v
		}
		return t
	}
	first, err := Scrape(ctx, addr)
	if err != nil {
		return callSnapshot{}, err
	}
	before := total(ByLabel(first, metrics.NameBackendCalls, "operation"))
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return callSnapshot{}, ctx.Err()
		}
		s, err := Scrape(ctx, addr)
		if err != nil {
			return callSnapshot{}, err
		}
		now := time.Now()
		calls := ByLabel(s, metrics.NameBackendCalls, "operation")
		if total(calls) != before {
			return callSnapshot{at: now, calls: calls}, nil
		}
	}
	return callSnapshot{}, fmt.Errorf("backend call counters at %s did not change within %s", addr, timeout)
}

// Cost counts SQS API calls per delivered job under steady load, at the
// client: the gateway's and the drainer's counters by operation, scraped
// from their /metrics, over a window in which the worker counts the
// deliveries.
func Cost(ctx context.Context, env *Env, rec *Recorder, o CostOptions, command string) error {
	o.defaults()
	fig := Figure{
		ID: "4.calls-per-job", Item: 4, Order: 1, Command: command, Goal: "≤ 0.4",
		Name: "Cost: SQS API calls per delivered job (send, receive, delete, visibility, depth polls)",
	}
	return rec.Measure([]Figure{fig}, func() error { return cost(ctx, env, rec, o, fig) })
}

// costRun is one run of the cost scenario.
type costRun struct {
	total     float64            // calls per delivered job
	perJob    map[string]float64 // by operation
	rows      [][]string         // by operation: each process's calls, per job
	procs     []string
	delivered float64 // jobs/s in the windows
	p50, p99  time.Duration
	errs      int
	firstErr  error
	actions   string
}

func cost(ctx context.Context, env *Env, rec *Recorder, o CostOptions, fig Figure) error {
	w, err := StartWorker(0)
	if err != nil {
		return err
	}
	defer w.Stop()
	def, err := costOnce(ctx, env, o, w, "cost-sqs", nil)
	if err != nil {
		return err
	}
	env.Logf("  default send linger: %.3f calls/job, Submit p50 %s p99 %s", def.total, Ms(def.p50), Ms(def.p99))
	lingered, err := costOnce(ctx, env, o, w, "cost-sqs-linger", []string{"--sqs-send-linger", o.SendLinger.String()})
	if err != nil {
		return fmt.Errorf("with --sqs-send-linger %s: %w", o.SendLinger, err)
	}
	env.Logf("  --sqs-send-linger %s: %.3f calls/job, Submit p50 %s p99 %s", o.SendLinger, lingered.total, Ms(lingered.p50), Ms(lingered.p99))
	fig.Measured = fmt.Sprintf("%.3f calls/job at %s jobs/s delivered (floor with batches of 10 ≈ 0.3); with --sqs-send-linger %s, same run: %.3f, Submit p50 %s against %s",
		def.total, Num(def.delivered), o.SendLinger, lingered.total, Ms(lingered.p50), Ms(def.p50))
	fig.Status = AtMost(def.total, 0.4)
	rec.Add(fig)
	header := []string{"operation"}
	for _, p := range def.procs {
		header = append(header, p+" calls")
	}
	header = append(header, "per delivered job")
	lingerRow := func(linger string, r costRun) []string {
		return []string{linger, fmt.Sprintf("%.3f", r.total), fmt.Sprintf("%.3f", r.perJob["SendMessageBatch"]), Ms(r.p50), Ms(r.p99), errCell(r.errs, r.firstErr)}
	}
	body := fmt.Sprintf("A gateway without drainers and one cmd/drainer process on the local SQS server; %d tenants submit %g jobs/s "+
		"in all with unary Submit (open loop); a no-op worker; drainer concurrency %d. After %s of warmup, each process's "+
		"`%s` counters (the SQS client's own count of requests, retries included, published every 5 s) are read just "+
		"after they change, and again about %s later; each process's calls are divided by the jobs the worker saw "+
		"delivered in that process's own window (%s delivered jobs/s). The drainer reads queue depths for its metrics once a minute, the gateway "+
		"every 10 s for routing: both are in the count. Submit errors: %s. Drainer actions since its start (its metrics): %s.\n\n%s\nTotal: **%.3f** calls per delivered job.\n\n"+
		"The same again on a new cluster whose processes run with `--sqs-send-linger %s` (the default is %s): a send waits that long for others of its queue to share a "+
		"`SendMessageBatch`, and its Submit waits with it. Submit latency is over each whole run, warmup included.\n\n%s",
		o.Tenants, o.Rate, o.Concurrency, o.Warmup, metrics.NameBackendCalls, o.Window, Num(def.delivered), errCell(def.errs, def.firstErr), def.actions,
		Table(header, def.rows), def.total, o.SendLinger, sqsqueue.LingerDefault,
		Table([]string{"send linger", "calls per delivered job", "of them SendMessageBatch", "Submit p50", "Submit p99", "submit errors"}, [][]string{
			lingerRow("default ("+sqsqueue.LingerDefault.String()+")", def),
			lingerRow(o.SendLinger.String(), lingered),
		}))
	rec.Detail("cost", 4, "4. Cost [SQS]", body)
	return nil
}

// costOnce runs the cost load on a new SQS cluster called name whose
// processes get args, delivering to w, and counts the calls.
func costOnce(ctx context.Context, env *Env, o CostOptions, w *Worker, name string, args []string) (costRun, error) {
	w.Reset()
	tenants := NewTenants("cost", o.Tenants, Open)
	cl, err := env.StartCluster(ctx, ClusterConfig{Name: name, Backend: SQS, Tenants: tenants, WorkerAddr: w.Addr, Concurrency: o.Concurrency, Drain: true, Args: args})
	if err != nil {
		return costRun{}, err
	}
	defer cl.Close()
	c := cl.Client
	var tr Tracker
	streams := make([]Stream, len(tenants))
	for i, t := range tenants {
		streams[i] = tr.Stream(c, t, o.Rate/float64(len(tenants)))
	}
	var load *PacedResult
	stopLoad := testcluster.Background(ctx, func(ctx context.Context) { load = Paced(ctx, streams, o.Warmup+o.Window+time.Minute, 4096) })
	defer stopLoad()
	if !sleepCtx(ctx, o.Warmup) {
		return costRun{}, ctx.Err()
	}
	type proc struct {
		name, addr string
		a, b       callSnapshot
	}
	var procs []*proc
	for _, p := range cl.Procs() {
		addr, err := p.Addr(ctx, "metrics listening")
		if err != nil {
			return costRun{}, err
		}
		procs = append(procs, &proc{name: p.Spec.Name, addr: addr})
	}
	snap := func(get func(*proc) *callSnapshot) error {
		errs := make(chan error, len(procs))
		for _, p := range procs {
			go func() {
				s, err := alignedCalls(ctx, p.addr, 30*time.Second)
				*get(p) = s
				errs <- err
			}()
		}
		for range procs {
			if err := <-errs; err != nil {
				return err
			}
		}
		return nil
	}
	if err := snap(func(p *proc) *callSnapshot { return &p.a }); err != nil {
		return costRun{}, err
	}
	if !sleepCtx(ctx, o.Window-time.Second) {
		return costRun{}, ctx.Err()
	}
	if err := snap(func(p *proc) *callSnapshot { return &p.b }); err != nil {
		return costRun{}, err
	}
	stopLoad()
	r := costRun{perJob: map[string]float64{}, actions: DrainActions(ctx, cl), p50: Percentile(load.Latencies, 50), p99: Percentile(load.Latencies, 99)}
	r.errs, r.firstErr = tr.Errors()
	ds, _ := w.Deliveries()
	delivered := func(from, to time.Time) int {
		n := 0
		for _, d := range ds {
			if !d.Start.Before(from) && d.Start.Before(to) {
				n++
			}
		}
		return n
	}
	byProc := map[string]map[string]float64{}
	var jobsTotal, secsTotal float64
	for _, p := range procs {
		n := delivered(p.a.at, p.b.at)
		if n == 0 {
			return costRun{}, fmt.Errorf("no job delivered in the %s window", p.name)
		}
		jobsTotal += float64(n)
		secsTotal += p.b.at.Sub(p.a.at).Seconds()
		byProc[p.name] = map[string]float64{}
		for op, v := range p.b.calls {
			d := v - p.a.calls[op]
			byProc[p.name][op] = d
			r.perJob[op] += d / float64(n)
		}
		r.procs = append(r.procs, p.name)
	}
	for _, op := range slices.Sorted(maps.Keys(r.perJob)) {
		if r.perJob[op] == 0 {
			continue
		}
		r.total += r.perJob[op]
		row := []string{op}
		for _, p := range procs {
			row = append(row, Num(byProc[p.name][op]))
		}
		r.rows = append(r.rows, append(row, fmt.Sprintf("%.3f", r.perJob[op])))
	}
	r.delivered = jobsTotal / secsTotal
	return r, nil
}
