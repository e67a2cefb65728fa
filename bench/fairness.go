package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// FairnessOptions configures the fairness scenario (item 2).
type FairnessOptions struct {
	Backend string
	// Duration of the load in each run. Defaults to 10s.
	Duration time.Duration
	// Quiet tenants, each sending QuietRate jobs/s. Defaults: 9 at 20/s.
	Quiet     int
	QuietRate float64
	// NoisyRate is a noisy tenant's drain rate (its nominal rate); it
	// sends Burst times that, and the gateway admits it all. Defaults:
	// 20/s and 20×.
	NoisyRate float64
	Burst     float64
	// Noisy lists the noisy-tenant counts of the variants. Defaults to
	// 1 and 3 (each also runs without noise, 0, as the reference).
	Noisy []int
	// Service is the worker's time per job and Concurrency the drainers';
	// capacity is Concurrency/Service jobs/s. Defaults: 40ms and 16
	// (400/s: more than the quiet load, less than quiet plus noise).
	Service     time.Duration
	Concurrency int
	// Tail bounds the wait for the quiet tenants' last jobs after the
	// load stops. Defaults to 60s.
	Tail time.Duration
	// Plots is the directory plots are written to; RelPlots is the same
	// relative to the markdown file.
	Plots, RelPlots string
}

func (o *FairnessOptions) defaults() {
	o.Duration = or(o.Duration, 10*time.Second)
	if o.Quiet == 0 {
		o.Quiet = 9
	}
	if o.QuietRate == 0 {
		o.QuietRate = 20
	}
	if o.NoisyRate == 0 {
		o.NoisyRate = 20
	}
	if o.Burst == 0 {
		o.Burst = 20
	}
	if len(o.Noisy) == 0 {
		o.Noisy = []int{1, 3}
	}
	o.Service = or(o.Service, 40*time.Millisecond)
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	o.Tail = or(o.Tail, 60*time.Second)
}

func or(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Staleness is the lane's staleness bound in the fairness and recovery
// scenarios: short, so that backlogging acts within a short run.
const Staleness = 2 * time.Second

// fairRun is one run's outcome.
type fairRun struct {
	fifo         bool
	noisy        int
	quiet, noise []Outcome
	start, end   time.Time // load start; end of observation
	errs         int
	firstErr     error
	repeats      int
}

func (r fairRun) mode() string {
	if r.fifo {
		return "FIFO"
	}
	return "sluice"
}

// Fairness runs quiet tenants alone and beside 1 and 3 noisy tenants,
// with sluice's sidelining and shuffle-sharding and as a plain FIFO, and
// reports the quiet tenants' dwell as a ratio of the run without noise.
func Fairness(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	var figs []Figure
	for i, n := range o.Noisy {
		figs = append(figs, Figure{
			ID: fmt.Sprintf("2.quiet-p99-%dnoisy%s", n, sid), Item: 2, Order: i + 1, Command: command,
			Name: fmt.Sprintf("Fairness: quiet tenants' p99 dwell with %d noisy tenant%s ÷ without noise%s", n, plural(n), sname),
			Goal: "≤ 1.5×",
		})
	}
	if err := fairness(ctx, env, rec, o, figs); err != nil {
		rec.Fail(figs, err)
		return err
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func fairness(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, figs []Figure) error {
	w, err := StartWorker()
	if err != nil {
		return err
	}
	defer w.Stop()
	w.SetService(o.Service)
	maxNoisy := 0
	for _, n := range o.Noisy {
		maxNoisy = max(maxNoisy, n)
	}
	quiet := NewTenants("quiet", o.Quiet, Tenant{
		SubmitRate: 10 * o.QuietRate, SubmitBurst: int(10 * o.QuietRate),
		DrainRate: 5 * o.QuietRate, DrainBurst: int(5 * o.QuietRate), MaxInFlight: o.Concurrency,
	})
	noisy := NewTenants("noisy", maxNoisy, Tenant{
		SubmitRate: 10 * o.Burst * o.NoisyRate, SubmitBurst: int(10 * o.Burst * o.NoisyRate),
		DrainRate: o.NoisyRate, DrainBurst: int(o.NoisyRate), MaxInFlight: o.Concurrency,
	})
	all := append(append([]Tenant{}, quiet...), noisy...)

	// Each mode runs without noise before and after its noisy variants;
	// the ratios divide by the better of the two (lower quiet p99), so a
	// stall of the shared machine during one of them cannot flatter the
	// noisy runs.
	runs := map[string]fairRun{}
	key := func(fifo bool, n int) string { return fmt.Sprintf("%v/%d", fifo, n) }
	order := append(append([]int{0}, o.Noisy...), -1) // -1: the run without noise after
	label := func(n int) string {
		switch n {
		case 0:
			return "0 (before)"
		case -1:
			return "0 (after)"
		}
		return fmt.Sprint(n)
	}
	p := func(os []Outcome, q float64) time.Duration { return Percentile(Dwells(os), q) }
	base := map[bool]fairRun{}
	baseOf := map[bool]int{}
	for _, fifo := range []bool{false, true} {
		for _, n := range order {
			r, err := fairOnce(ctx, env, w, o, all, quiet, noisy[:max(n, 0)], fifo)
			if err != nil {
				return err
			}
			runs[key(fifo, n)] = r
			q := Dwells(r.quiet)
			env.Logf("  %-6s %-10s noisy: quiet p50 %s p99 %s (%d jobs, %d undelivered); noisy: %s",
				r.mode(), label(n), Ms(Percentile(q, 50)), Ms(Percentile(q, 99)), len(r.quiet), Undelivered(r.quiet), noisyCell(r))
		}
		before, after := runs[key(fifo, 0)], runs[key(fifo, -1)]
		base[fifo], baseOf[fifo] = before, 0
		if p(after.quiet, 99) < p(before.quiet, 99) {
			base[fifo], baseOf[fifo] = after, -1
		}
	}

	ratio := func(a, b time.Duration) float64 {
		if a == Never {
			return Ratio(1e300, 1)
		}
		return Ratio(float64(a), float64(b))
	}
	var rows [][]string
	for _, fifo := range []bool{false, true} {
		b := base[fifo]
		for _, n := range order {
			r := runs[key(fifo, n)]
			l := label(n)
			if n <= 0 && n == baseOf[fifo] {
				l += ", the reference"
			}
			rows = append(rows, []string{
				r.mode(), l,
				Ms(p(r.quiet, 50)), Ms(p(r.quiet, 99)),
				ratioCell(ratio(p(r.quiet, 50), p(b.quiet, 50))), ratioCell(ratio(p(r.quiet, 99), p(b.quiet, 99))),
				fmt.Sprintf("%d / %d", Undelivered(r.quiet), len(r.quiet)),
				noisyCell(r), errCell(r.errs, r.firstErr),
			})
		}
	}
	for i, n := range o.Noisy {
		s, sb := runs[key(false, n)], base[false]
		f, fb := runs[key(true, n)], base[true]
		rs := ratio(p(s.quiet, 99), p(sb.quiet, 99))
		rf := ratio(p(f.quiet, 99), p(fb.quiet, 99))
		fig := figs[i]
		fig.Measured = fmt.Sprintf("%s (p99 %s vs %s; p50 ratio %s); FIFO baseline, same run: %s (p99 %s vs %s)",
			ratioCell(rs), Ms(p(s.quiet, 99)), Ms(p(sb.quiet, 99)), ratioCell(ratio(p(s.quiet, 50), p(sb.quiet, 50))),
			ratioCell(rf), Ms(p(f.quiet, 99)), Ms(p(fb.quiet, 99)))
		fig.Status = AtMost(rs, 1.5)
		rec.Add(fig)
	}

	// Plots: p99 dwell over time (by submit time) of quiet and noisy jobs,
	// sluice against the FIFO, one plot per noisy variant.
	sid, sname := suffix(o.Backend)
	var plots []string
	for _, n := range o.Noisy {
		s, f := runs[key(false, n)], runs[key(true, n)]
		c := Chart{
			Title:  fmt.Sprintf("Fairness%s: %d quiet tenants at %g/s, %d noisy at %g× their %g/s drain rate", sname, o.Quiet, o.QuietRate, n, o.Burst, o.NoisyRate),
			XLabel: "time job was submitted (s since load start)", YLabel: "p99 dwell per 1 s window (ms, log)", LogY: true,
			HLines: []Mark{{X: float64(p(base[false].quiet, 99)) / 1e6 * 1.5, Label: "goal: 1.5 × sluice's quiet p99 without noise"}},
		}
		add := func(r fairRun, os []Outcome, name, color string, fifo bool) {
			x, y := DwellSeries(os, r.start, r.end, time.Second, 0, o.Duration)
			c.Series = append(c.Series, Series{Name: name, Color: color, Dotted: fifo, X: x, Y: y})
		}
		// Noisy lines first, so the quiet ones are drawn on top (in the
		// FIFO they coincide).
		add(s, s.noise, "sluice: noisy tenant"+plural(n)+" (still waiting at the end: time waited)", Palette[3], false)
		add(f, f.noise, "FIFO: noisy tenant"+plural(n), Palette[4], true)
		add(s, s.quiet, "sluice: quiet tenants", Palette[0], false)
		c.Series = append(c.Series, Series{Name: "FIFO: quiet tenants", Color: Palette[1], Dashed: true})
		c.Series[len(c.Series)-1].X, c.Series[len(c.Series)-1].Y = DwellSeries(f.quiet, f.start, f.end, time.Second, 0, o.Duration)
		name := fmt.Sprintf("fairness-%dnoisy%s.svg", n, strings.ReplaceAll(sid, ".", "-"))
		if err := c.WriteFile(filepath.Join(o.Plots, name)); err != nil {
			return err
		}
		plots = append(plots, fmt.Sprintf("![fairness, %d noisy](%s)", n, filepath.ToSlash(filepath.Join(o.RelPlots, name))))
	}

	body := fmt.Sprintf("%d quiet tenants at %g jobs/s each; each noisy tenant has a drain rate of %g/s and sends %g× that (%g/s), "+
		"all admitted by the gateway; the worker takes %s per job and the drainers deliver %d at once (capacity %g jobs/s). "+
		"Load for %s per run on the %s backend, staleness bound %s; dwell = delivery start at the worker − the gateway's enqueued_at, per job. "+
		"Each mode runs without noise before and after its noisy runs, and each ratio divides by the better of those two (the "+
		"reference), so that a stall of the shared machine in one of them cannot flatter the noisy runs. Noisy jobs still waiting at the end of a run count "+
		"as not delivered (the plots draw them at the time they had waited).\n\n%s\n%s\n",
		o.Quiet, o.QuietRate, o.NoisyRate, o.Burst, o.Burst*o.NoisyRate, o.Service, o.Concurrency,
		float64(o.Concurrency)/o.Service.Seconds(), o.Duration, o.Backend, Staleness,
		Table([]string{"mode", "noisy", "quiet p50", "quiet p99", "p50 ÷ no noise", "p99 ÷ no noise", "quiet undelivered", "noisy: delivered, p50", "submit errors"}, rows),
		strings.Join(plots, "\n"))
	rec.Detail("fairness"+sid, 2, "2. Fairness"+sname, body)
	return nil
}

func ratioCell(r float64) string {
	if r > 1e200 {
		return "∞ (not delivered)"
	}
	return fmt.Sprintf("%.2f×", r)
}

func noisyCell(r fairRun) string {
	if len(r.noise) == 0 {
		return "—"
	}
	d := len(r.noise) - Undelivered(r.noise)
	return fmt.Sprintf("%d of %d, p50 %s", d, len(r.noise), Ms(Percentile(Dwells(r.noise), 50)))
}

// fairOnce runs one fairness configuration on a fresh cluster.
func fairOnce(ctx context.Context, env *Env, w *Worker, o FairnessOptions, all, quiet, noisy []Tenant, fifo bool) (fairRun, error) {
	r := fairRun{fifo: fifo, noisy: len(noisy)}
	w.Reset()
	cl, err := env.StartCluster(ctx, ClusterConfig{
		Name: fmt.Sprintf("fairness-%s-%dnoisy-fifo-%v", o.Backend, len(noisy), fifo), Backend: o.Backend, FIFO: fifo,
		Tenants: all, WorkerAddr: w.Addr, Concurrency: o.Concurrency, Drain: true, Staleness: Staleness,
	})
	if err != nil {
		return r, err
	}
	defer cl.Close()
	c, err := Dial(cl.Addr)
	if err != nil {
		return r, err
	}
	defer c.Close()
	var tq, tn Tracker
	var streams []Stream
	for _, t := range quiet {
		streams = append(streams, tq.Stream(c, t, o.QuietRate))
	}
	for _, t := range noisy {
		streams = append(streams, tn.Stream(c, t, o.Burst*o.NoisyRate))
	}
	r.start = time.Now()
	Paced(ctx, streams, o.Duration, 4096)
	// Wait for the quiet tenants' jobs (the noisy ones may take minutes
	// at their drain rate: they are not waited for).
	sent := tq.Jobs()
	ids := make(map[string]bool, len(sent))
	for _, s := range sent {
		ids[s.ID] = true
	}
	deadline := time.Now().Add(o.Tail)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ds, _ := w.Deliveries()
		n := 0
		for _, d := range ds {
			if ids[d.JobID] {
				n++
			}
		}
		if n >= len(ids) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.end = time.Now()
	ds, repeats := w.Deliveries()
	r.repeats = repeats
	r.quiet, r.noise = Join(sent, ds), Join(tn.Jobs(), ds)
	eq, fq := tq.Errors()
	en, fn := tn.Errors()
	r.errs, r.firstErr = eq+en, fq
	if r.firstErr == nil {
		r.firstErr = fn
	}
	return r, ctx.Err()
}
