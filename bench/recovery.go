package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// RecoveryOptions configures the recovery scenario (item 3).
type RecoveryOptions struct {
	Backend string
	// Tenants share Rate jobs/s, submitted throughout. Defaults: 10
	// tenants, 300 jobs/s.
	Tenants int
	Rate    float64
	// Service and Concurrency set the delivery capacity
	// (Concurrency/Service). Defaults: 20ms and 16 (800 jobs/s).
	Service     time.Duration
	Concurrency int
	// Spread is how far each job's service time varies around Service,
	// as in FairnessOptions. Defaults to 0.25 (±25 %); negative makes
	// every job take exactly Service.
	Spread float64
	// Baseline is the time before the drainers stop; Outage how long they
	// stay stopped. Defaults: 8s and 15s.
	Baseline, Outage time.Duration
	// MaxRecovery bounds the time after the restart. Defaults to 60s.
	MaxRecovery time.Duration
	// Window is the width of the dwell windows judged. Defaults to 500ms.
	Window time.Duration
	// Hogs is the number of busy-loop processes running beside the runs
	// (a CPU-starved machine); 0 for none.
	Hogs int
	// Plots is the directory plots are written to; RelPlots is the same
	// relative to the markdown file.
	Plots, RelPlots string
}

func (o *RecoveryOptions) defaults() {
	o.Tenants = cmp.Or(o.Tenants, 10)
	o.Rate = cmp.Or(o.Rate, 300)
	o.Service = cmp.Or(o.Service, 20*time.Millisecond)
	o.Concurrency = cmp.Or(o.Concurrency, 16)
	o.Spread = cmp.Or(o.Spread, 0.25)
	o.Baseline = cmp.Or(o.Baseline, 8*time.Second)
	o.Outage = cmp.Or(o.Outage, 15*time.Second)
	o.MaxRecovery = cmp.Or(o.MaxRecovery, 60*time.Second)
	o.Window = cmp.Or(o.Window, 500*time.Millisecond)
}

// recRun is one recovery run.
type recRun struct {
	fifo                bool
	jobs                []Outcome
	stopAt, restartAt   time.Time // drainers stopped; restart begun
	readyAt, end        time.Time // drainers delivering again; observation end
	baseP99, threshold  time.Duration
	baseJobs            int           // the jobs baseP99 is of
	recovered           time.Duration // since restartAt; -1 if not within the run
	backlog             int           // jobs waiting at the restart
	backlogDone         time.Duration // since restartAt until every job sent before it was delivered; -1 if not
	errs                int
	firstErr            error
	startSent, lastSent time.Time
	actions             string // the drainers' actions, at the end
}

// backlogAfterReady is the time from the drainers being ready again until
// the backlog was delivered; -1 if it was not.
func (r recRun) backlogAfterReady() time.Duration {
	if r.backlogDone < 0 {
		return -1
	}
	return max(r.backlogDone-r.readyAt.Sub(r.restartAt), 0)
}

func (r recRun) mode() string { return modeName(r.fifo) }

// Recovery stops the drainers under steady traffic until a backlog
// builds, restarts them, and measures how long until fresh jobs see the
// baseline dwell again and until the backlog is delivered, for sluice
// and for the plain FIFO; with o.Hogs, on a CPU-starved machine.
func Recovery(ctx context.Context, env *Env, rec *Recorder, o RecoveryOptions, command string) error {
	o.defaults()
	sid, sname := suffix(o.Backend)
	rec.Drop("3.recovery" + sid)
	starved, order := "", 10
	if o.Hogs > 0 {
		starved, order = "-starved", 20
		sname = fmt.Sprintf(", CPU-starved (%d busy loops beside)", o.Hogs) + sname
	}
	figs := []Figure{
		{
			ID: "fair.recovery-fresh" + starved + sid, Item: 3, Order: order, Command: command, Goal: "≤ 10 s",
			Name: "Recovery: time after the drainers' restart until fresh jobs see baseline dwell again" + sname,
		},
		{
			ID: "fair.recovery-backlog" + starved + sid, Item: 3, Order: order + 1, Command: command, Goal: "≤ 1.25 × backlog ÷ (capacity − fresh rate)",
			Name: "Recovery: time after the drainers are ready until the whole backlog is delivered" + sname,
		},
		{
			ID: "fair.recovery-steady-p99" + starved + sid, Item: 3, Order: order + 2, Command: command, Goal: "≤ 1.2×",
			Name: "Recovery: sluice's steady-state p99 dwell (before the outage) ÷ FIFO's" + sname,
		},
	}
	return rec.Measure(figs, func() error { return recovery(ctx, env, rec, o, figs, starved, sname) })
}

func recovery(ctx context.Context, env *Env, rec *Recorder, o RecoveryOptions, figs []Figure, starved, sname string) error {
	w, err := StartWorker(o.Service)
	if err != nil {
		return err
	}
	defer w.Stop()
	w.SetServiceSpread(max(o.Spread, 0))
	if o.Hogs > 0 {
		stop, err := StartHogs(o.Hogs)
		if err != nil {
			return err
		}
		defer stop()
		env.Logf("  %d busy loops started; load average %s", o.Hogs, testcluster.LoadAvg())
	}
	// No hard ceiling; a fair-rate mark far above what each sends.
	tenants := NewTenants("steady", o.Tenants, Tenant{
		SubmitRate: 10 * o.Rate, SubmitBurst: int(10 * o.Rate),
		DrainRate: 10 * o.Rate, DrainBurst: int(10 * o.Rate),
	})
	var runs []recRun
	for _, fifo := range []bool{false, true} {
		r, err := recoverOnce(ctx, env, w, o, tenants, fifo)
		if err != nil {
			return err
		}
		runs = append(runs, r)
		env.Logf("  %-6s backlog %d: baseline p99 %s, recovered %s, backlog delivered %s after ready; %s", r.mode(), r.backlog, Ms(r.baseP99),
			recoveredCell(r.recovered, o.Window, o.MaxRecovery), secs(r.backlogAfterReady(), o.MaxRecovery), r.actions)
	}
	s, f := runs[0], runs[1]
	capacity := float64(o.Concurrency) / o.Service.Seconds()
	fresh, backlog, steady := figs[0], figs[1], figs[2]
	fresh.Measured = fmt.Sprintf("%s with a backlog of %s jobs (FIFO, same run: %s, backlog %s)",
		recoveredCell(s.recovered, o.Window, o.MaxRecovery), Num(float64(s.backlog)), recoveredCell(f.recovered, o.Window, o.MaxRecovery), Num(float64(f.backlog)))
	fresh.Status = Misses
	if s.recovered >= 0 && s.recovered <= 10*time.Second {
		fresh.Status = Meets
	}
	bound := func(r recRun) time.Duration {
		return time.Duration(1.25 * float64(r.backlog) / (capacity - o.Rate) * float64(time.Second))
	}
	backlog.Measured = fmt.Sprintf("%s for %s jobs (bound %.1f s = 1.25 × %s ÷ (%g − %g)/s; jobs undelivered at the end: %d); FIFO, same run: %s for %s (bound %.1f s)",
		secs(s.backlogAfterReady(), o.MaxRecovery), Num(float64(s.backlog)), bound(s).Seconds(), Num(float64(s.backlog)), capacity, o.Rate, Undelivered(s.jobs),
		secs(f.backlogAfterReady(), o.MaxRecovery), Num(float64(f.backlog)), bound(f).Seconds())
	backlog.Status = Misses
	if d := s.backlogAfterReady(); d >= 0 && d <= bound(s) {
		backlog.Status = Meets
	}
	steady = steadyFigure(steady, s, f, o)
	for _, fig := range []Figure{fresh, backlog, steady} {
		rec.Add(fig)
	}

	sid, _ := suffix(o.Backend)
	c := Chart{
		Title:  fmt.Sprintf("Recovery%s: %g jobs/s throughout, drainers stopped for %s", sname, o.Rate, o.Outage),
		XLabel: "time job was submitted (s since the drainers' restart)", YLabel: fmt.Sprintf("p99 dwell per %s window (ms, log)", o.Window), LogY: true,
		Bands: []Band{{From: -o.Outage.Seconds(), To: 0, Label: "drainers stopped"}},
		Marks: []Mark{{X: 0, Label: "restart"}},
	}
	var rows [][]string
	for i, r := range runs {
		lo := r.startSent.Sub(r.restartAt)
		hi := r.lastSent.Sub(r.restartAt) + o.Window
		x, y := DwellSeries(r.jobs, r.restartAt, r.end, o.Window, lo.Truncate(o.Window)-o.Window, hi)
		c.Series = append(c.Series, Series{Name: r.mode() + ": all jobs", Color: Palette[i], Dashed: r.fifo, X: x, Y: y})
		c.HLines = append(c.HLines, Mark{X: float64(r.threshold) / 1e6, Label: r.mode() + ": threshold (2 × baseline p99)"})
		if r.recovered >= 0 {
			c.Marks = append(c.Marks, Mark{X: r.recovered.Seconds(), Label: r.mode() + " recovered"})
		}
		rows = append(rows, []string{
			r.mode(), Num(float64(r.backlog)), Ms(r.baseP99), Ms(r.threshold),
			recoveredCell(r.recovered, o.Window, o.MaxRecovery), secs(r.backlogAfterReady(), o.MaxRecovery), Ms(r.readyAt.Sub(r.restartAt)),
			fmt.Sprintf("%d / %d", Undelivered(r.jobs), len(r.jobs)), r.actions, errCell(r.errs, r.firstErr),
		})
	}
	name := "recovery" + starved + strings.ReplaceAll(sid, ".", "-") + ".svg"
	if err := c.WriteFile(filepath.Join(o.Plots, name)); err != nil {
		return err
	}
	body := fmt.Sprintf("%d tenants submit %g jobs/s in all, throughout; the worker takes %s and the drainers deliver %d at once "+
		"(capacity %g jobs/s). After %s the drainers stop for %s (%s), then restart. A job is fresh if submitted after the restart "+
		"began; fresh jobs are judged in %s windows by submit time, and the system has recovered from the first of %d windows in a "+
		"row whose p99 dwell is within 2× the baseline p99 (of the jobs submitted in %s; at least +20 ms). "+
		"Sluice's lane has a staleness bound of %s: older jobs go to the backlog queue, fresh ones first.\n\n%s\n![recovery](%s)\n",
		o.Tenants, o.Rate, serviceText(o.Service, o.Spread), o.Concurrency, float64(o.Concurrency)/o.Service.Seconds(), o.Baseline, o.Outage,
		outageHow(o.Backend), o.Window, sustainWindows, o.baselineWindow("stop"), Staleness,
		Table([]string{"mode", "backlog at restart", "baseline p99", "threshold", "recovered after", "backlog delivered after ready", "restart took", "undelivered at end", "drainer actions", "submit errors"}, rows),
		filepath.ToSlash(filepath.Join(o.RelPlots, name)))
	if o.Hogs > 0 {
		body = fmt.Sprintf("On a CPU-starved machine: %d `sh -c 'while :; do :; done'` processes run beside both runs (load average at the end %s).\n\n", o.Hogs, testcluster.LoadAvg()) + body
	}
	rec.Detail("recovery"+starved+sid, 3, "3. Recovery"+sname, body)
	return nil
}

// baselineSkip is the start of the load the baseline leaves out: the
// cluster's first jobs.
const baselineSkip = time.Second

// baselineWindow says which jobs' dwell the baseline p99 is of.
func (o RecoveryOptions) baselineWindow(before string) string {
	return fmt.Sprintf("the %s before the %s, after the load's first %s", o.Baseline-baselineSkip, before, baselineSkip)
}

// steadyFigure fills the steady-state figure: sluice's baseline p99 ÷
// the FIFO's.
func steadyFigure(fig Figure, s, f recRun, o RecoveryOptions) Figure {
	rs := durRatio(s.baseP99, f.baseP99)
	if s.baseJobs == 0 || f.baseJobs == 0 {
		rs = math.NaN() // a p99 of no jobs is Percentile's zero, not a dwell
	}
	fig.Measured = fmt.Sprintf("%s (p99 dwell of the jobs submitted in %s: sluice %s, FIFO %s)", ratioCell(rs), o.baselineWindow("outage"), Ms(s.baseP99), Ms(f.baseP99))
	fig.Status = AtMost(rs, 1.2)
	return fig
}

func outageHow(backend string) string {
	if backend == SQS {
		return "the drainer process is stopped with SIGTERM and started again; the gateway runs throughout"
	}
	return "the embedded store is held by one process, so the gateway restarts without drainers, and again with them; submits wait on the same address meanwhile"
}

func secs(d, limit time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("not within %s", limit)
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// recovered formats a recovery time, whose resolution is one window.
func recoveredCell(d, window, limit time.Duration) string {
	if d == 0 {
		return fmt.Sprintf("< %s (first window)", window)
	}
	return secs(d, limit)
}

func recoverOnce(ctx context.Context, env *Env, w *Worker, o RecoveryOptions, tenants []Tenant, fifo bool) (recRun, error) {
	r := recRun{fifo: fifo, recovered: -1, backlogDone: -1}
	w.Reset()
	cl, err := env.StartCluster(ctx, ClusterConfig{
		Name: fmt.Sprintf("recovery-%s-fifo-%v", o.Backend, fifo), Backend: o.Backend, FIFO: fifo,
		Tenants: tenants, WorkerAddr: w.Addr, Concurrency: o.Concurrency, Drain: true, Staleness: Staleness,
	})
	if err != nil {
		return r, err
	}
	defer cl.Close()
	c := cl.Client
	var tr Tracker
	streams := make([]Stream, len(tenants))
	for i, t := range tenants {
		streams[i] = tr.Stream(c, t, o.Rate/float64(len(tenants)))
	}
	r.startSent = time.Now()
	stopLoad := testcluster.Background(ctx, func(ctx context.Context) { Paced(ctx, streams, o.Baseline+o.Outage+o.MaxRecovery+time.Minute, 4096) })
	defer stopLoad()
	if !sleepCtx(ctx, o.Baseline) {
		return r, ctx.Err()
	}
	r.stopAt = time.Now()
	if err := cl.SetDraining(ctx, false); err != nil {
		return r, err
	}
	if !sleepCtx(ctx, o.Outage-time.Since(r.stopAt)) {
		return r, ctx.Err()
	}
	r.restartAt = time.Now()
	delivered := w.Count()
	r.backlog = len(tr.Jobs()) - delivered
	if err := cl.SetDraining(ctx, true); err != nil {
		return r, err
	}
	r.readyAt = time.Now()
	atRestart, _ := w.Deliveries()
	r.baseP99, r.baseJobs = baseline(Join(tr.Jobs(), atRestart), r.startSent.Add(baselineSkip), r.stopAt)
	r.threshold = max(2*r.baseP99, r.baseP99+20*time.Millisecond)
	// Watch until the backlog is delivered and fresh jobs have been at
	// baseline for a while, or the time is up.
	for ctx.Err() == nil && time.Since(r.restartAt) < o.MaxRecovery {
		if !sleepCtx(ctx, time.Second) {
			break
		}
		ds, _ := w.Deliveries()
		jobs := Join(tr.Jobs(), ds)
		done, rec := r.judge(jobs, o.Window, time.Now())
		if done >= 0 && rec >= 0 && time.Since(r.restartAt)-rec > 5*time.Second {
			break
		}
	}
	stopLoad()
	r.lastSent = time.Now()
	// Let the last submits be delivered (they are fresh, so quickly once
	// recovered), then judge.
	w.WaitCount(ctx, len(tr.Jobs()), 10*time.Second)
	r.end = time.Now()
	r.actions = DrainActions(ctx, cl)
	ds, _ := w.Deliveries()
	r.jobs = Join(tr.Jobs(), ds)
	r.backlogDone, r.recovered = r.judge(r.jobs, o.Window, r.lastSent)
	r.errs, r.firstErr = tr.Errors()
	return r, ctx.Err()
}

// baseline returns the p99 dwell of the jobs submitted in [from, to),
// to being the drainers' stop, and how many they are. None is left out:
// a job whose delivery had not started by to counts with the time it had
// waited by then (a lower bound; not the outage it then sat through).
func baseline(jobs []Outcome, from, to time.Time) (time.Duration, int) {
	var dw []time.Duration
	for _, j := range jobs {
		if j.At.Before(from) || !j.At.Before(to) {
			continue
		}
		d := j.Dwell
		if !j.Delivered || !j.Start.Before(to) {
			d = to.Sub(j.At)
		}
		dw = append(dw, d)
	}
	return Percentile(dw, 99), len(dw)
}

// judge returns, relative to the restart, when every job submitted
// before it had been delivered, and from when fresh jobs (submitted
// after it, up to until) stayed within the threshold; -1 for not yet.
func (r recRun) judge(jobs []Outcome, win time.Duration, until time.Time) (backlogDone, recovered time.Duration) {
	backlogDone = 0
	for _, j := range jobs {
		if !j.At.Before(r.restartAt) {
			continue
		}
		if !j.Delivered {
			backlogDone = -1
			break
		}
		backlogDone = max(backlogDone, j.Start.Sub(r.restartAt))
	}
	at := make([]time.Time, len(jobs))
	vals := make([]time.Duration, len(jobs))
	for i, j := range jobs {
		at[i], vals[i] = j.At, j.Dwell
	}
	// Only whole windows that ended at least a threshold before until
	// count: later jobs may not have had their chance yet.
	hi := until.Sub(r.restartAt) - r.threshold
	hi = hi.Truncate(win)
	if hi <= 0 {
		return backlogDone, -1
	}
	ws := Windows(at, vals, r.restartAt, win, 0, hi)
	// Recovered from the first window that starts a run of sustainWindows
	// consecutive windows within the threshold: one late spike on a shared
	// machine does not undo a recovery, and a dip does not make one.
	run := 0
	for i, wd := range ws {
		if wd.P99 > r.threshold || (i > 0 && wd.Start != ws[i-1].Start+win) {
			run = 0
		}
		if wd.P99 <= r.threshold {
			run++
		}
		if run == sustainWindows {
			return backlogDone, ws[i-sustainWindows+1].Start
		}
	}
	return backlogDone, -1
}

// sustainWindows is how many consecutive windows within the threshold
// make a recovery.
const sustainWindows = 4

// sleepCtx waits for d or until ctx ends (see periodic.Sleep).
var sleepCtx = periodic.Sleep
