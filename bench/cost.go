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
}

func (o *CostOptions) defaults() {
	o.Tenants = cmp.Or(o.Tenants, 10)
	o.Rate = cmp.Or(o.Rate, 500)
	o.Warmup = cmp.Or(o.Warmup, 10*time.Second)
	o.Window = cmp.Or(o.Window, 30*time.Second)
	o.Concurrency = cmp.Or(o.Concurrency, 32)
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

func cost(ctx context.Context, env *Env, rec *Recorder, o CostOptions, fig Figure) error {
	w, err := StartWorker(0)
	if err != nil {
		return err
	}
	defer w.Stop()
	tenants := NewTenants("cost", o.Tenants, Open)
	cl, err := env.StartCluster(ctx, ClusterConfig{Name: "cost-sqs", Backend: SQS, Tenants: tenants, WorkerAddr: w.Addr, Concurrency: o.Concurrency, Drain: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	c := cl.Client
	var tr Tracker
	streams := make([]Stream, len(tenants))
	for i, t := range tenants {
		streams[i] = tr.Stream(c, t, o.Rate/float64(len(tenants)))
	}
	stopLoad := testcluster.Background(ctx, func(ctx context.Context) { Paced(ctx, streams, o.Warmup+o.Window+time.Minute, 4096) })
	defer stopLoad()
	if !sleepCtx(ctx, o.Warmup) {
		return ctx.Err()
	}
	type proc struct {
		name, addr string
		a, b       callSnapshot
	}
	var procs []*proc
	for _, p := range cl.Procs() {
		addr, err := p.Addr(ctx, "metrics listening")
		if err != nil {
			return err
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
		return err
	}
	if !sleepCtx(ctx, o.Window-time.Second) {
		return ctx.Err()
	}
	if err := snap(func(p *proc) *callSnapshot { return &p.b }); err != nil {
		return err
	}
	actions := DrainActions(ctx, cl)
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
	perJob := map[string]float64{}
	byProc := map[string]map[string]float64{}
	var jobsTotal, secsTotal float64
	for _, p := range procs {
		n := delivered(p.a.at, p.b.at)
		if n == 0 {
			return fmt.Errorf("no job delivered in the %s window", p.name)
		}
		jobsTotal += float64(n)
		secsTotal += p.b.at.Sub(p.a.at).Seconds()
		byProc[p.name] = map[string]float64{}
		for op, v := range p.b.calls {
			d := v - p.a.calls[op]
			byProc[p.name][op] = d
			perJob[op] += d / float64(n)
		}
	}
	var total float64
	var rows [][]string
	for _, op := range slices.Sorted(maps.Keys(perJob)) {
		if perJob[op] == 0 {
			continue
		}
		total += perJob[op]
		row := []string{op}
		for _, p := range procs {
			row = append(row, Num(byProc[p.name][op]))
		}
		rows = append(rows, append(row, fmt.Sprintf("%.3f", perJob[op])))
	}
	errs, firstErr := tr.Errors()
	deliveredRate := jobsTotal / secsTotal
	fig.Measured = fmt.Sprintf("%.3f calls/job at %s jobs/s delivered (floor with batches of 10 ≈ 0.3)", total, Num(deliveredRate))
	fig.Status = AtMost(total, 0.4)
	rec.Add(fig)
	header := []string{"operation"}
	for _, p := range procs {
		header = append(header, p.name+" calls")
	}
	header = append(header, "per delivered job")
	body := fmt.Sprintf("A gateway without drainers and one cmd/drainer process on the local SQS server; %d tenants submit %g jobs/s "+
		"in all with unary Submit (open loop); a no-op worker; drainer concurrency %d. After %s of warmup, each process's "+
		"`%s` counters (the SQS client's own count of requests, retries included, published every 5 s) are read just "+
		"after they change, and again about %s later; each process's calls are divided by the jobs the worker saw "+
		"delivered in that process's own window (%s delivered jobs/s). The drainer reads queue depths for its metrics once a minute, the gateway "+
		"every 10 s for routing: both are in the count. Submit errors: %s. Drainer actions since its start (its metrics): %s.\n\n%s\nTotal: **%.3f** calls per delivered job.\n",
		o.Tenants, o.Rate, o.Concurrency, o.Warmup, metrics.NameBackendCalls, o.Window, Num(deliveredRate), errCell(errs, firstErr), actions,
		Table(header, rows), total)
	rec.Detail("cost", 4, "4. Cost [SQS]", body)
	return nil
}
