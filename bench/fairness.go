package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// FairnessOptions configures the fairness scenarios (issue 13's "must
// show"): quiet tenants beside noisy ones, a slow tenant, weights, on a
// starved machine and with two drainers on SQS.
type FairnessOptions struct {
	Backend string
	// Duration of the load in each run. Defaults to 8s.
	Duration time.Duration
	// Quiet tenants, each sending QuietRate jobs/s. Defaults: 9 at 20/s.
	Quiet     int
	QuietRate float64
	// NoisyRate is a noisy tenant's drain rate (its fair-rate mark); it
	// sends Burst times that, and the gateway admits it all. Defaults:
	// 20/s and 20×.
	NoisyRate float64
	Burst     float64
	// Noisy lists the noisy-tenant counts of the main variants. Defaults
	// to 1 and 3 (each also runs without noise, 0, as the reference).
	Noisy []int
	// Many is the noisy-tenant count of the many-tenants variant, among
	// ManyTenants in all; the quiet ones share Quiet × QuietRate, and the
	// noisy ones send as much in all as 3 noisy tenants of the main
	// variants. Defaults: 10 among 40; a negative Many skips it.
	Many, ManyTenants int
	// Service is the worker's time per job and Concurrency the drainers';
	// capacity is Concurrency/Service jobs/s. Defaults: 40ms and 16
	// (400/s: more than the quiet load, less than quiet plus noise).
	Service     time.Duration
	Concurrency int
	// Spread is how far each job's service time varies around Service,
	// uniformly, as a fraction of it: real jobs never all take the same
	// time. Defaults to 0.25 (±25 %); negative makes every job take
	// exactly Service.
	Spread float64
	// Tail bounds the wait for the quiet tenants' last jobs after the
	// load stops. Defaults to 60s.
	Tail time.Duration
	// Plots is the directory plots are written to; RelPlots is the same
	// relative to the markdown file.
	Plots, RelPlots string
}

func (o *FairnessOptions) defaults() {
	o.Duration = cmp.Or(o.Duration, 8*time.Second)
	o.Quiet = cmp.Or(o.Quiet, 9)
	o.QuietRate = cmp.Or(o.QuietRate, 20)
	o.NoisyRate = cmp.Or(o.NoisyRate, 20)
	o.Burst = cmp.Or(o.Burst, 20)
	if len(o.Noisy) == 0 {
		o.Noisy = []int{1, 3}
	}
	o.Many = cmp.Or(o.Many, 10)
	o.ManyTenants = cmp.Or(o.ManyTenants, 40)
	o.Service = cmp.Or(o.Service, 40*time.Millisecond)
	o.Concurrency = cmp.Or(o.Concurrency, 16)
	o.Spread = cmp.Or(o.Spread, 0.25)
	o.Tail = cmp.Or(o.Tail, 60*time.Second)
}

// Staleness is the lane's staleness bound in the fairness and recovery
// scenarios: short, so that backlogging acts within a short run.
const Staleness = 2 * time.Second

// capacity is the delivery capacity in jobs/s at the default service.
func (o FairnessOptions) capacity() float64 { return float64(o.Concurrency) / o.Service.Seconds() }

// quietTenants are n quiet tenants: admitted at 10× their rate, with a
// fair-rate mark of 5× it. No hard ceiling.
func quietTenants(prefix string, n int, rate float64) []Tenant {
	return NewTenants(prefix, n, Tenant{SubmitRate: 10 * rate, SubmitBurst: int(10 * rate), DrainRate: 5 * rate, DrainBurst: int(5 * rate)})
}

// noisyTenants are n tenants with a fair-rate mark of rate, admitted at
// up to 10× burst × rate (they send burst × rate).
func noisyTenants(prefix string, n int, rate, burst float64) []Tenant {
	return NewTenants(prefix, n, Tenant{SubmitRate: 10 * burst * rate, SubmitBurst: int(10 * burst * rate), DrainRate: rate, DrainBurst: int(rate)})
}

// fairLoad is one tenant's open-loop stream in a run.
type fairLoad struct {
	t     Tenant
	rate  float64
	quiet bool
}

// fairCase is one configuration of a set: its streams, and whether it is
// a no-noise reference for the cases of its group.
type fairCase struct {
	label string
	group string
	ref   bool
	loads []fairLoad
}

func loads(ts []Tenant, rate float64, quiet bool) []fairLoad {
	ls := make([]fairLoad, len(ts))
	for i, t := range ts {
		ls[i] = fairLoad{t: t, rate: rate, quiet: quiet}
	}
	return ls
}

// fairSet is a series of runs on one tenant file, each case in sluice
// mode and in FIFO mode, on a fresh cluster each.
type fairSet struct {
	name     string
	backend  string
	drainers int // on SQS
	conc     int // per drainer
	tenants  []Tenant
	service  map[string]time.Duration // per tenant, over the default
	cases    []fairCase
	// pull delivers to the worker as pull workers (worker.Connect),
	// granting conc credits to each draining process.
	pull bool
}

// fairRun is one run's outcome.
type fairRun struct {
	fifo         bool
	c            fairCase
	quiet, noise []Outcome
	ds           []Delivery
	start, end   time.Time // load start; end of observation
	dur          time.Duration
	accepted     int // jobs accepted; errs more were refused or failed
	errs         int
	firstErr     error
	actions      string
}

func (r fairRun) mode() string { return modeName(r.fifo) }

func modeName(fifo bool) string {
	if fifo {
		return "FIFO"
	}
	return "sluice"
}

// inLoad returns the deliveries that started while the load ran.
func (r fairRun) inLoad() []Delivery {
	var out []Delivery
	for _, d := range r.ds {
		if !d.Start.Before(r.start) && d.Start.Before(r.start.Add(r.dur)) {
			out = append(out, d)
		}
	}
	return out
}

// offered is the jobs/s the tenants offered during the load: every
// submit, accepted or not (errs).
func (r fairRun) offered() float64 { return float64(r.accepted+r.errs) / r.dur.Seconds() }

// utilization is delivered jobs/s during the load ÷ min(capacity,
// offered jobs/s): jobs the gateway refused were offered all the same.
func (r fairRun) utilization(capacity float64) float64 {
	delivered := float64(len(r.inLoad())) / r.dur.Seconds()
	return Ratio(delivered, min(capacity, r.offered()))
}

// noisyRate is the noisy tenants' delivered jobs/s during the load.
func (r fairRun) noisyRate() float64 {
	quiet := map[string]bool{}
	for _, l := range r.c.loads {
		quiet[l.t.ID] = l.quiet
	}
	n := 0
	for _, d := range r.inLoad() {
		if !quiet[d.Tenant] {
			n++
		}
	}
	return float64(n) / r.dur.Seconds()
}

// workTime is the worker time each tenant's jobs used among those
// delivered during the load (a call still under way counts until end).
func (r fairRun) workTime() map[string]time.Duration {
	wt := map[string]time.Duration{}
	for _, d := range r.inLoad() {
		took := d.Took
		if took == 0 {
			took = r.end.Sub(d.Start)
		}
		wt[d.Tenant] += took
	}
	return wt
}

// noisyShares returns each noisy tenant's share of the noisy tenants'
// worker time during the load, in the order of the case's loads.
func (r fairRun) noisyShares() []float64 {
	wt := r.workTime()
	var total time.Duration
	for _, l := range r.c.loads {
		if !l.quiet {
			total += wt[l.t.ID]
		}
	}
	var out []float64
	for _, l := range r.c.loads {
		if !l.quiet {
			out = append(out, Ratio(float64(wt[l.t.ID]), float64(total)))
		}
	}
	return out
}

// busy is the fraction of the drainers' slots busy during the load.
func (r fairRun) busy(slots int) float64 {
	var sum time.Duration
	for _, t := range r.workTime() {
		sum += t
	}
	return Ratio(sum.Seconds(), float64(slots)*r.dur.Seconds())
}

func (r fairRun) p(q float64) time.Duration { return Percentile(Dwells(r.quiet), q) }

// steadyP99 is the quiet tenants' p99 dwell of jobs submitted after
// the first second of the load: the run without its start-up.
func (r fairRun) steadyP99() string {
	var ds []time.Duration
	for _, o := range r.quiet {
		if o.At.Sub(r.start) >= time.Second {
			ds = append(ds, o.Dwell)
		}
	}
	if len(ds) == 0 {
		return "—"
	}
	return Ms(Percentile(ds, 99))
}

// quietCell formats the quiet tenants' q-th percentile dwell; "—" if the
// case has none.
func (r fairRun) quietCell(q float64) string {
	if len(r.quiet) == 0 {
		return "—"
	}
	return Ms(r.p(q))
}

// results of a set: runs[fifo][i] is case i.
type fairResults struct {
	set  fairSet
	runs map[bool][]fairRun
}

// run measures every case, sluice first, then FIFO.
func (s fairSet) run(ctx context.Context, env *Env, w *Worker, o FairnessOptions) (fairResults, error) {
	res := fairResults{set: s, runs: map[bool][]fairRun{}}
	for _, fifo := range []bool{false, true} {
		for _, c := range s.cases {
			r, err := s.once(ctx, env, w, o, c, fifo)
			if err != nil {
				return res, err
			}
			res.runs[fifo] = append(res.runs[fifo], r)
			env.Logf("  %-6s %-26s quiet p50 %s p99 %s (%d jobs, %d undelivered); noisy %.0f/s delivered; utilization %.2f; busy %.0f %%; %s",
				r.mode(), c.label, r.quietCell(50), r.quietCell(99), len(r.quiet), Undelivered(r.quiet), r.noisyRate(),
				r.utilization(s.capacity(o)), 100*r.busy(s.slots()), r.actions)
		}
	}
	return res, nil
}

func (s fairSet) slots() int { return s.conc * max(s.drainers, 1) }

func (s fairSet) capacity(o FairnessOptions) float64 {
	return float64(s.slots()) / o.Service.Seconds()
}

// once runs one case on a fresh cluster.
func (s fairSet) once(ctx context.Context, env *Env, w *Worker, o FairnessOptions, c fairCase, fifo bool) (fairRun, error) {
	r := fairRun{fifo: fifo, c: c, dur: o.Duration}
	w.Reset()
	for t, d := range s.service {
		w.SetTenantService(t, d)
	}
	cl, err := env.StartCluster(ctx, ClusterConfig{
		Name: fmt.Sprintf("%s-%s-%s-fifo-%v", s.name, s.backend, strings.ReplaceAll(c.label, " ", ""), fifo), Backend: s.backend, FIFO: fifo,
		Tenants: s.tenants, WorkerAddr: w.Addr, Pull: s.pull, Concurrency: s.conc, Drainers: s.drainers, Drain: true, Staleness: Staleness,
	})
	if err != nil {
		return r, err
	}
	defer cl.Close()
	if s.pull {
		defer w.Pull(cl.WorkerAddrs(), cl.WorkerKey, s.conc)()
	}
	cli := cl.Client
	var tq, tn Tracker
	var streams []Stream
	for _, l := range c.loads {
		tr := &tn
		if l.quiet {
			tr = &tq
		}
		streams = append(streams, tr.Stream(cli, l.t, l.rate))
	}
	r.start = time.Now()
	Paced(ctx, streams, o.Duration, 4096)
	// Wait for the quiet tenants' jobs (the noisy ones may take minutes:
	// they are not waited for).
	sent := tq.Jobs()
	ids := make(map[string]bool, len(sent))
	for _, j := range sent {
		ids[j.ID] = true
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
	r.actions = DrainActions(ctx, cl)
	r.ds, _ = w.Deliveries()
	r.quiet, r.noise = Join(sent, r.ds), Join(tn.Jobs(), r.ds)
	r.accepted = len(sent) + len(tn.Jobs())
	eq, fq := tq.Errors()
	en, fn := tn.Errors()
	r.errs, r.firstErr = eq+en, fq
	if r.firstErr == nil {
		r.firstErr = fn
	}
	return r, ctx.Err()
}

// ref returns the reference run of case i's group: of the group's
// no-noise runs in either mode, the one with the lowest quiet p99 (its
// mode and index). Without noise both modes deliver the quiet load
// alike, so a stall of the shared machine during one of them cannot
// flatter the noisy runs.
func (fr fairResults) ref(i int) (best fairRun, fifo bool, bi int) {
	bi = -1
	for _, mode := range []bool{false, true} {
		for j, r := range fr.runs[mode] {
			if r.c.ref && r.c.group == fr.set.cases[i].group && (bi < 0 || r.p(99) < best.p(99)) {
				best, fifo, bi = r, mode, j
			}
		}
	}
	return best, fifo, bi
}

// p99Ratio is case i's quiet p99 in a mode ÷ the reference's.
func (fr fairResults) p99Ratio(fifo bool, i int) float64 {
	b, _, _ := fr.ref(i)
	return quietRatio(fr.runs[fifo][i], b, 99)
}

// quietRatio is r's quiet q-th percentile dwell ÷ ref's; NaN (not
// measured) if either run has no quiet jobs, whose percentile is no
// dwell but Percentile's zero.
func quietRatio(r, ref fairRun, q float64) float64 {
	if len(r.quiet) == 0 || len(ref.quiet) == 0 {
		return math.NaN()
	}
	return durRatio(r.p(q), ref.p(q))
}

// durRatio is a ÷ b: +Inf when a is Never, NaN (not measured) when the
// reference b is Never or zero, since a ratio to a job never delivered
// is no ratio at all (and would be all but zero).
func durRatio(a, b time.Duration) float64 {
	switch {
	case b == Never:
		return math.NaN()
	case a == Never:
		return math.Inf(1)
	}
	return Ratio(float64(a), float64(b))
}

func ratioCell(r float64) string {
	switch {
	case math.IsInf(r, 1):
		return "∞ (not delivered)"
	case math.IsNaN(r):
		return "n/a (no jobs, or the reference not delivered)"
	}
	return fmt.Sprintf("%.2f×", r)
}

// table is the breakdown of a set's runs.
func (fr fairResults) table(o FairnessOptions) string {
	var rows [][]string
	for _, fifo := range []bool{false, true} {
		for i, r := range fr.runs[fifo] {
			l := r.c.label
			_, rf, bi := fr.ref(i)
			if rf == fifo && bi == i {
				l += ", the reference"
			}
			ratio := "—"
			if bi >= 0 {
				ratio = ratioCell(fr.p99Ratio(fifo, i))
			}
			shares := "—"
			if ss := r.noisyShares(); len(ss) > 1 {
				var parts []string
				for _, s := range ss {
					parts = append(parts, fmt.Sprintf("%.0f %%", 100*s))
				}
				shares = strings.Join(parts, " : ")
			}
			rows = append(rows, []string{
				r.mode(), l, r.quietCell(50), r.quietCell(99), r.steadyP99(), ratio,
				fmt.Sprintf("%d / %d", Undelivered(r.quiet), len(r.quiet)),
				fmt.Sprintf("%.2f", r.utilization(fr.set.capacity(o))), fmt.Sprintf("%.0f %%", 100*r.busy(fr.set.slots())),
				noisyCell(r), shares, r.actions, errCell(r.errs, r.firstErr),
			})
		}
	}
	return Table([]string{
		"mode", "case", "quiet p50", "quiet p99", "quiet p99 after the first 1 s", "p99 ÷ no noise", "quiet undelivered",
		"utilization", "slots busy", "noisy: delivered/s in load (all), p50", "noisy worker-time shares", "drainer actions", "submit errors",
	}, rows)
}

func noisyCell(r fairRun) string {
	if len(r.noise) == 0 {
		return "—"
	}
	d := len(r.noise) - Undelivered(r.noise)
	return fmt.Sprintf("%.0f/s (%d of %d by the end), p50 %s", r.noisyRate(), d, len(r.noise), Ms(Percentile(Dwells(r.noise), 50)))
}

// plot writes the p99 dwell over time of quiet and noisy jobs of case i,
// sluice against FIFO, with the quiet p99 goal (goal × the reference's),
// and returns its markdown.
func (fr fairResults) plot(o FairnessOptions, i int, file, title string, goal float64) (string, error) {
	if err := fr.chart(o, i, title, goal).WriteFile(filepath.Join(o.Plots, file)); err != nil {
		return "", err
	}
	return fmt.Sprintf("![%s](%s)", title, filepath.ToSlash(filepath.Join(o.RelPlots, file))), nil
}

// chart is plot's chart.
func (fr fairResults) chart(o FairnessOptions, i int, title string, goal float64) Chart {
	s, f := fr.runs[false][i], fr.runs[true][i]
	b, bf, _ := fr.ref(i)
	c := Chart{
		Title:  title,
		XLabel: "time job was submitted (s since load start)", YLabel: "p99 dwell per 1 s window (ms, log)", LogY: true,
		HLines: []Mark{{X: float64(b.p(99)) / 1e6 * goal, Label: fmt.Sprintf("goal: %g × the quiet p99 without noise (%s's run)", goal, modeName(bf))}},
	}
	add := func(r fairRun, os []Outcome, name, color string, dotted, dashed bool) {
		x, y := DwellSeries(os, r.start, r.end, time.Second, 0, o.Duration)
		c.Series = append(c.Series, Series{Name: name, Color: color, Dotted: dotted, Dashed: dashed, X: x, Y: y})
	}
	// Noisy lines first, so the quiet ones are drawn on top (in the FIFO
	// they coincide).
	add(s, s.noise, "sluice: noisy tenants (still waiting at the end: time waited)", Palette[3], false, false)
	add(f, f.noise, "FIFO: noisy tenants", Palette[4], true, false)
	add(s, s.quiet, "sluice: quiet tenants", Palette[0], false, false)
	add(f, f.quiet, "FIFO: quiet tenants", Palette[1], false, true)
	return c
}

// Fairness runs quiet tenants alone and beside 1, 3 and (among 40
// tenants) 10 noisy tenants, in sluice mode and as a plain FIFO, and
// reports the quiet tenants' dwell as a ratio of the run without noise
// and the workers' utilization.
func Fairness(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	rec.Drop("2.quiet-p99-1noisy"+sid, "2.quiet-p99-3noisy"+sid)
	counts := slices.Clone(o.Noisy)
	if o.Many > 0 {
		counts = append(counts, o.Many)
	}
	var figs []Figure
	for i, n := range counts {
		figs = append(figs, Figure{
			ID: fmt.Sprintf("fair.quiet-p99-%dnoisy%s", n, sid), Item: 2, Order: 2 * i, Command: command,
			Name: fmt.Sprintf("Fairness: quiet tenants' p99 dwell with %d noisy tenants ÷ without noise%s", n, sname), Goal: "≤ 1.5×",
		}, Figure{
			ID: fmt.Sprintf("fair.utilization-%dnoisy%s", n, sid), Item: 2, Order: 2*i + 1, Command: command,
			Name: fmt.Sprintf("Fairness: delivered jobs/s ÷ min(capacity, offered) with %d noisy tenants%s", n, sname), Goal: "≥ 0.95",
		})
	}
	return o.measure(rec, figs, func(w *Worker) error { return fairness(ctx, env, rec, o, w, figs, counts) })
}

// quietFigure fills a quiet-p99 figure from case i of fr.
func quietFigure(fig Figure, fr fairResults, i int, goal float64) Figure {
	s, f := fr.runs[false][i], fr.runs[true][i]
	b, bf, _ := fr.ref(i)
	rs, rf := fr.p99Ratio(false, i), fr.p99Ratio(true, i)
	fig.Measured = fmt.Sprintf("%s (p99 %s vs %s without noise, %s's run; p50 ratio %s; quiet jobs undelivered: %d); FIFO, same run: %s (p99 %s)",
		ratioCell(rs), s.quietCell(99), b.quietCell(99), modeName(bf), ratioCell(quietRatio(s, b, 50)), Undelivered(s.quiet),
		ratioCell(rf), f.quietCell(99))
	fig.Status = AtMost(rs, goal)
	return fig
}

// utilFigure fills a utilization figure from case i of fr.
func utilFigure(fig Figure, fr fairResults, o FairnessOptions, i int, goal float64) Figure {
	s, f := fr.runs[false][i], fr.runs[true][i]
	capacity := fr.set.capacity(o)
	u := s.utilization(capacity)
	fig.Measured = fmt.Sprintf("%.3f (%.0f jobs/s delivered during the load of %.0f/s offered, capacity %.0f/s; noisy tenants got %.0f jobs/s; slots busy %.0f %%); FIFO, same run: %.3f (noisy %.0f/s)",
		u, float64(len(s.inLoad()))/s.dur.Seconds(), s.offered(), capacity, s.noisyRate(), 100*s.busy(fr.set.slots()),
		f.utilization(capacity), f.noisyRate())
	fig.Status = AtLeast(u, goal)
	return fig
}

func fairness(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, w *Worker, figs []Figure, counts []int) error {
	sid, sname := suffix(o.Backend)

	// The main set: Quiet quiet tenants, and up to max(Noisy) noisy ones;
	// the runs without noise come before and after the noisy ones.
	maxNoisy := slices.Max(o.Noisy)
	quiet := quietTenants("quiet", o.Quiet, o.QuietRate)
	noisy := noisyTenants("noisy", maxNoisy, o.NoisyRate, o.Burst)
	main := fairSet{name: "fairness", backend: o.Backend, conc: o.Concurrency, tenants: append(slices.Clone(quiet), noisy...)}
	main.cases = append(main.cases, fairCase{label: "no noise (before)", group: "main", ref: true, loads: loads(quiet, o.QuietRate, true)})
	for _, n := range o.Noisy {
		main.cases = append(main.cases, fairCase{
			label: fmt.Sprintf("%d noisy", n), group: "main",
			loads: append(loads(quiet, o.QuietRate, true), loads(noisy[:n], o.Burst*o.NoisyRate, false)...),
		})
	}
	main.cases = append(main.cases, fairCase{label: "no noise (after)", group: "main", ref: true, loads: loads(quiet, o.QuietRate, true)})
	mr, err := main.run(ctx, env, w, o)
	if err != nil {
		return err
	}
	var plots []string
	for k, n := range o.Noisy {
		i := k + 1
		rec.Add(quietFigure(figs[2*k], mr, i, 1.5))
		rec.Add(utilFigure(figs[2*k+1], mr, o, i, 0.95))
		md, err := mr.plot(o, i, fmt.Sprintf("fairness-%dnoisy%s.svg", n, strings.ReplaceAll(sid, ".", "-")),
			fmt.Sprintf("Fairness%s: %d quiet tenants at %g/s, %d noisy at %g× their %g/s fair rate", sname, o.Quiet, o.QuietRate, n, o.Burst, o.NoisyRate), 1.5)
		if err != nil {
			return err
		}
		plots = append(plots, md)
	}
	body := fmt.Sprintf("%d quiet tenants at %g jobs/s each (fair-rate mark %g/s); each noisy tenant has a fair-rate mark (drain_rate) of %g/s and sends %g× that (%g/s), "+
		"all admitted by the gateway; no tenant has a hard ceiling. Each tenant sends at a steady rate from its own random phase. The worker takes %s and the drainers deliver %d at once (capacity %g jobs/s). "+
		"Load for %s per run on the %s backend, staleness bound %s; dwell = delivery start at the worker − the gateway's enqueued_at, per job, over the whole run, start-up included. "+
		"Each mode runs without noise before and after its noisy runs, and every ratio divides by the lowest quiet p99 of those four (the "+
		"reference; without noise both modes deliver the quiet load alike), so that a stall of the shared machine in one of them cannot flatter the noisy runs. Utilization = jobs whose delivery started during the "+
		"load ÷ its length, ÷ min(capacity, jobs/s offered: every submit, accepted or refused); slots busy = the worker time of those jobs ÷ (slots × load time). "+
		"Noisy jobs still waiting at the end of a run count as not delivered (the plots draw them at the time they had waited).\n\n%s\n%s\n",
		o.Quiet, o.QuietRate, 5*o.QuietRate, o.NoisyRate, o.Burst, o.Burst*o.NoisyRate, o.serviceText(), o.Concurrency,
		o.capacity(), o.Duration, o.Backend, Staleness, mr.table(o), strings.Join(plots, "\n"))
	rec.Detail("fairness"+sid, 2, "2. Fairness"+sname, body)
	if o.Many <= 0 {
		return nil
	}

	// Many tenants: Many noisy among ManyTenants; the quiet ones share
	// the main set's quiet rate, the noisy ones 3 noisy tenants' noise.
	nq := o.ManyTenants - o.Many
	qRate := float64(o.Quiet) * o.QuietRate / float64(nq)
	nRate := 3 * o.NoisyRate / float64(o.Many)
	mq := quietTenants("mquiet", nq, qRate)
	mn := noisyTenants("mnoisy", o.Many, nRate, o.Burst)
	many := fairSet{name: "fairness-many", backend: o.Backend, conc: o.Concurrency, tenants: append(slices.Clone(mq), mn...)}
	many.cases = []fairCase{
		{label: "no noise", group: "many", ref: true, loads: loads(mq, qRate, true)},
		{label: fmt.Sprintf("%d noisy", o.Many), group: "many", loads: append(loads(mq, qRate, true), loads(mn, o.Burst*nRate, false)...)},
	}
	manyR, err := many.run(ctx, env, w, o)
	if err != nil {
		return err
	}
	k := len(o.Noisy)
	rec.Add(quietFigure(figs[2*k], manyR, 1, 1.5))
	rec.Add(utilFigure(figs[2*k+1], manyR, o, 1, 0.95))
	md, err := manyR.plot(o, 1, fmt.Sprintf("fairness-%dnoisy%s.svg", o.Many, strings.ReplaceAll(sid, ".", "-")),
		fmt.Sprintf("Fairness%s: %d quiet tenants at %.3g/s, %d noisy at %.3g/s each", sname, nq, qRate, o.Many, o.Burst*nRate), 1.5)
	if err != nil {
		return err
	}
	body = fmt.Sprintf("%d tenants: %d quiet ones sharing %g jobs/s (%.3g/s each, fair-rate mark %.3g/s) and %d noisy ones, each with a fair-rate mark of %.3g/s and "+
		"sending %g× that (%.3g/s; %g/s in all, as much as 3 noisy tenants of the section above). Otherwise as above; the reference is the better of the two runs "+
		"(sluice, FIFO) of the same quiet tenants without noise.\n\n%s\n%s\n",
		o.ManyTenants, nq, float64(o.Quiet)*o.QuietRate, qRate, 5*qRate, o.Many, nRate, o.Burst, o.Burst*nRate, o.Burst*nRate*float64(o.Many),
		manyR.table(o), md)
	rec.Detail("fairness-many"+sid, 2, fmt.Sprintf("2. Fairness%s: %d noisy among %d tenants", sname, o.Many, o.ManyTenants), body)
	return nil
}

// FairnessStarved is the 3-noisy variant with Hogs busy-loop processes
// beside the cluster, in sluice mode and as a FIFO.
func FairnessStarved(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, hogs int, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	fig := Figure{
		ID: "fair.quiet-p99-3noisy-starved" + sid, Item: 2, Order: 20, Command: command, Goal: "≤ 3× and ≤ FIFO's",
		Name: fmt.Sprintf("Fairness on a CPU-starved machine (%d busy loops beside): quiet p99 with 3 noisy tenants ÷ without noise%s", hogs, sname),
	}
	return o.measure(rec, []Figure{fig}, func(w *Worker) error {
		stop, err := StartHogs(hogs)
		if err != nil {
			return err
		}
		defer stop()
		env.Logf("  %d busy loops started; load average %s", hogs, testcluster.LoadAvg())
		set := threeNoisy("fairness-starved", o)
		fr, err := set.run(ctx, env, w, o)
		if err != nil {
			return err
		}
		fig = quietFigure(fig, fr, 1, 3)
		if rs, rf := fr.p99Ratio(false, 1), fr.p99Ratio(true, 1); rs > rf {
			fig.Status = Misses
			fig.Measured += " — worse than the FIFO"
		}
		rec.Add(fig)
		md, err := fr.plot(o, 1, "fairness-3noisy-starved"+strings.ReplaceAll(sid, ".", "-")+".svg",
			fmt.Sprintf("Fairness%s, CPU-starved (%d busy loops): %d quiet tenants, 3 noisy", sname, hogs, o.Quiet), 3)
		if err != nil {
			return err
		}
		body := fmt.Sprintf("The 3-noisy case of the fairness section, with %d `sh -c 'while :; do :; done'` processes running beside the cluster and "+
			"the harness throughout (started before the first run, killed after the last; load average at the end %s). Reference: the better of the two runs "+
			"(sluice, FIFO) of the same quiet tenants without noise, on the same starved machine.\n\n%s\n%s\n", hogs, testcluster.LoadAvg(), fr.table(o), md)
		rec.Detail("fairness-starved"+sid, 2, "2. Fairness on a CPU-starved machine"+sname, body)
		return nil
	})
}

// serviceText says how long the worker takes per job.
func (o FairnessOptions) serviceText() string { return serviceText(o.Service, o.Spread) }

// serviceText says how long a worker of mean service time and spread
// (negative: none) takes per job.
func serviceText(service time.Duration, spread float64) string {
	if spread <= 0 {
		return fmt.Sprintf("%s per job", service)
	}
	return fmt.Sprintf("%s per job on average, each job's time drawn uniformly within ±%.0f %% of it (real jobs vary; with equal times, "+
		"slots that start together finish together, and a fresh job waits for the next such group)", service, 100*spread)
}

// measure runs a variant's measurement on a recording worker with o's
// service times; if it fails, figs are recorded as not measured, with why.
func (o FairnessOptions) measure(rec *Recorder, figs []Figure, run func(w *Worker) error) error {
	return rec.Measure(figs, func() error {
		w, err := StartWorker(o.Service)
		if err != nil {
			return err
		}
		defer w.Stop()
		w.SetServiceSpread(max(o.Spread, 0))
		return run(w)
	})
}

// threeNoisy is the set of the quiet tenants alone and beside 3 noisy
// ones.
func threeNoisy(name string, o FairnessOptions) fairSet {
	quiet := quietTenants("quiet", o.Quiet, o.QuietRate)
	noisy := noisyTenants("noisy", 3, o.NoisyRate, o.Burst)
	return fairSet{name: name, backend: o.Backend, conc: o.Concurrency, tenants: append(slices.Clone(quiet), noisy...), cases: []fairCase{
		{label: "no noise", group: "q", ref: true, loads: loads(quiet, o.QuietRate, true)},
		{label: "3 noisy", group: "q", loads: append(loads(quiet, o.QuietRate, true), loads(noisy, o.Burst*o.NoisyRate, false)...)},
	}}
}

// FairnessPull is the 3-noisy case with pull workers: the harness's worker
// connects to the drainers (worker.Connect) with as many credits as the
// push runs' slots, and the drainers' slots are its credits.
func FairnessPull(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	quiet := Figure{
		ID: "fair.quiet-p99-3noisy-pull" + sid, Item: 2, Order: 25, Command: command, Goal: "≤ 1.5×",
		Name: "Fairness with pull workers: quiet tenants' p99 dwell with 3 noisy tenants ÷ without noise" + sname,
	}
	util := Figure{
		ID: "fair.utilization-3noisy-pull" + sid, Item: 2, Order: 26, Command: command, Goal: "≥ 0.95",
		Name: "Fairness with pull workers: delivered jobs/s during the load ÷ min(capacity, offered), 3 noisy tenants" + sname,
	}
	return o.measure(rec, []Figure{quiet, util}, func(w *Worker) error {
		set := threeNoisy("fairness-pull", o)
		set.pull = true
		fr, err := set.run(ctx, env, w, o)
		if err != nil {
			return err
		}
		rec.Add(quietFigure(quiet, fr, 1, 1.5))
		rec.Add(utilFigure(util, fr, o, 1, 0.95))
		md, err := fr.plot(o, 1, "fairness-3noisy-pull"+strings.ReplaceAll(sid, ".", "-")+".svg",
			fmt.Sprintf("Fairness with pull workers%s: %d quiet tenants, 3 noisy", sname, o.Quiet), 1.5)
		if err != nil {
			return err
		}
		body := fmt.Sprintf("The 3-noisy case of the fairness section with pull workers: the same worker (%s) connects "+
			"to the drainers with worker.Connect and grants %d credits, so the drainers' %d slots are its credits; sluice's fair "+
			"scheduler hands them out as for push. Reference: the better of the two runs (sluice, FIFO) of the same quiet tenants "+
			"without noise.\n\n%s\n%s\n", o.serviceText(), set.conc, set.slots(), fr.table(o), md)
		rec.Detail("fairness-pull"+sid, 2, "2. Fairness with pull workers"+sname, body)
		return nil
	})
}

// FairnessSQS is the 3-noisy variant on the local SQS server with two
// drainer processes, each with half the slots.
func FairnessSQS(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, command string) error {
	o.Backend = SQS
	o.defaults()
	fig := Figure{
		ID: "fair.sqs-2drainers", Item: 2, Order: 30, Command: command, Goal: "≤ 2× and utilization ≥ 0.9",
		Name: "Fairness on SQS with two drainer processes: quiet p99 with 3 noisy tenants ÷ without noise, and utilization",
	}
	return o.measure(rec, []Figure{fig}, func(w *Worker) error {
		set := threeNoisy("fairness-sqs", o)
		set.drainers, set.conc = 2, o.Concurrency/2
		fr, err := set.run(ctx, env, w, o)
		if err != nil {
			return err
		}
		q := quietFigure(fig, fr, 1, 2)
		u := utilFigure(fig, fr, o, 1, 0.9)
		fig.Measured = q.Measured + "; utilization " + u.Measured
		fig.Status = bothStatus(q.Status, u.Status)
		rec.Add(fig)
		md, err := fr.plot(o, 1, "fairness-3noisy-sqs-2drainers.svg",
			fmt.Sprintf("Fairness on SQS, 2 drainers: %d quiet tenants, 3 noisy", o.Quiet), 2)
		if err != nil {
			return err
		}
		body := fmt.Sprintf("The 3-noisy case of the fairness section on the local SQS server (test/fauxqs), with the gateway and two `drainer run` "+
			"processes of %d slots each (capacity %g jobs/s in all, as on the embedded backend). Reference: the better of the two runs (sluice, FIFO) of the same quiet tenants without noise.\n\n%s\n%s\n",
			set.conc, set.capacity(o), fr.table(o), md)
		rec.Detail("fairness-sqs", 2, "2. Fairness on SQS with two drainers", body)
		return nil
	})
}

// bothStatus is the status of a figure with two goals: a miss of either
// is a miss, even if the other could not be measured.
func bothStatus(a, b string) string {
	switch {
	case a == Misses || b == Misses:
		return Misses
	case a == Meets && b == Meets:
		return Meets
	}
	return NotMeasured
}

// SlowTenant runs the quiet tenants beside two saturating tenants, one of
// whose jobs take 10× as long as the other's.
func SlowTenant(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	fig := Figure{
		ID: "fair.slow-tenant" + sid, Item: 2, Order: 40, Command: command, Goal: "≤ 1.5×, and slow share 0.5 ± 10 %",
		Name: "Slow tenant: quiet p99 ÷ without noise beside two saturating tenants, one with 10× longer jobs; the slow one's share of their worker time" + sname,
	}
	return o.measure(rec, []Figure{fig}, func(w *Worker) error {
		quiet := quietTenants("quiet", o.Quiet, o.QuietRate)
		fast := noisyTenants("fast", 1, o.NoisyRate, o.Burst)
		slow := noisyTenants("slow", 1, o.NoisyRate/10, o.Burst)
		// Each sends more than the whole capacity's worth of its jobs.
		fastRate, slowRate := o.capacity(), o.capacity()/4
		set := fairSet{
			name: "slow", backend: o.Backend, conc: o.Concurrency, tenants: append(append(slices.Clone(quiet), fast...), slow...),
			service: map[string]time.Duration{slow[0].ID: 10 * o.Service}, cases: []fairCase{
				{label: "no noise", group: "q", ref: true, loads: loads(quiet, o.QuietRate, true)},
				{label: "fast + slow", group: "q", loads: slices.Concat(loads(quiet, o.QuietRate, true), loads(fast, fastRate, false), loads(slow, slowRate, false))},
			},
		}
		fr, err := set.run(ctx, env, w, o)
		if err != nil {
			return err
		}
		q := quietFigure(fig, fr, 1, 1.5)
		share := func(fifo bool) float64 {
			ss := fr.runs[fifo][1].noisyShares()
			return ss[1]
		}
		ss := share(false)
		fig.Measured = fmt.Sprintf("%s; slow tenant's share of the two's worker time %.2f (FIFO, same run: %.2f); quiet p99 ratio detail: %s",
			ratioCell(fr.p99Ratio(false, 1)), ss, share(true), q.Measured)
		fig.Status = q.Status
		if math.Abs(ss-0.5) > 0.05 || math.IsNaN(ss) {
			fig.Status = Misses
		}
		rec.Add(fig)
		md, err := fr.plot(o, 1, "slow-tenant"+strings.ReplaceAll(sid, ".", "-")+".svg",
			fmt.Sprintf("Slow tenant%s: %d quiet tenants, a fast and a 10× slower saturating tenant", sname, o.Quiet), 1.5)
		if err != nil {
			return err
		}
		body := fmt.Sprintf("%d quiet tenants at %g jobs/s each beside two saturating tenants of equal weight: `fast` sends %g jobs/s of %s jobs, `slow` "+
			"%g jobs/s of %s jobs (the worker takes 10× longer for them), each with a fair-rate mark below what it sends. Capacity %d slots. "+
			"A tenant's worker time = the time the worker spent on its jobs whose delivery started during the load; the goal is each of the two "+
			"getting half of their worker time (±10 %%: 0.45–0.55). Job times vary within ±%.0f %%.\n\n%s\n%s\n",
			o.Quiet, o.QuietRate, fastRate, o.Service, slowRate, 10*o.Service, o.Concurrency, 100*max(o.Spread, 0), fr.table(o), md)
		rec.Detail("slow-tenant"+sid, 2, "2. Fairness: a slow tenant"+sname, body)
		return nil
	})
}

// Weights runs two saturating tenants with weights 1 and 3.
func Weights(ctx context.Context, env *Env, rec *Recorder, o FairnessOptions, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	fig := Figure{
		ID: "fair.weights" + sid, Item: 2, Order: 50, Command: command, Goal: "3 ± 10 % (2.7–3.3)",
		Name: "Weights: worker time of a weight-3 tenant ÷ a weight-1 tenant's, both saturating" + sname,
	}
	return o.measure(rec, []Figure{fig}, func(w *Worker) error {
		light := NewTenants("light", 1, Tenant{SubmitRate: 1e5, SubmitBurst: 1e5, DrainRate: o.NoisyRate, DrainBurst: int(o.NoisyRate), Weight: 1})
		heavy := NewTenants("heavy", 1, Tenant{SubmitRate: 1e5, SubmitBurst: 1e5, DrainRate: o.NoisyRate, DrainBurst: int(o.NoisyRate), Weight: 3})
		rate := o.capacity()
		set := fairSet{name: "weights", backend: o.Backend, conc: o.Concurrency, tenants: append(slices.Clone(light), heavy...), cases: []fairCase{
			{label: "weights 1 : 3", group: "w", loads: append(loads(light, rate, false), loads(heavy, rate, false)...)},
		}}
		fr, err := set.run(ctx, env, w, o)
		if err != nil {
			return err
		}
		ratio := func(fifo bool) (float64, []float64) {
			ss := fr.runs[fifo][0].noisyShares()
			return ss[1] / ss[0], ss
		}
		rs, ss := ratio(false)
		rf, _ := ratio(true)
		fig.Measured = fmt.Sprintf("%.2f (worker time %.0f %% : %.0f %%, utilization %.2f); FIFO, same run (weights ignored): %.2f",
			rs, 100*ss[0], 100*ss[1], fr.runs[false][0].utilization(set.capacity(o)), rf)
		fig.Status = Misses
		if rs >= 2.7 && rs <= 3.3 {
			fig.Status = Meets
		}
		rec.Add(fig)
		body := fmt.Sprintf("Two tenants, `weight: 1` and `weight: 3`, each sending %g jobs/s (the whole capacity: %d slots × %s jobs), both over their "+
			"fair-rate mark of %g/s. Worker time = the time the worker spent on each one's jobs whose delivery started during the %s load. Job times vary within ±%.0f %%.\n\n%s\n",
			rate, o.Concurrency, o.Service, o.NoisyRate, o.Duration, 100*max(o.Spread, 0), fr.table(o))
		rec.Detail("weights"+sid, 2, "2. Fairness: weights"+sname, body)
		return nil
	})
}
