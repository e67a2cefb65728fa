// Command sluice-bench runs sluice's benchmark scenarios against the real
// binaries on loopback and writes docs/benchmarks.md and the plots under
// docs/bench/ (`make bench`). Run one scenario with -run NAME; -long
// measures longer and bigger; the per-scenario flags set sizes and
// durations. Every figure is also printed as it is measured.
//
// `sluice-bench bare --listen ADDR` serves the bare grpc-go ingest server
// that the front-door scenario compares the gateway with.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/bench"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-bench:", err)
		os.Exit(1)
	}
}

// scenarios in the order a full run measures them.
var scenarios = []string{"gobench", "frontdoor", "fairness", "fairness-pull", "slow", "weights", "recovery", "fairness-starved", "recovery-starved", "fairness-sqs", "cost", "memory", "drain", "pull-stuck"}

// hogs is the number of busy-loop processes of the CPU-starved scenarios.
const hogs = 2

type config struct {
	run      string
	long     bool
	sqs      bool
	out      string
	results  string
	plots    string
	work     string
	keep     bool
	front    bench.FrontDoorOptions
	fair     bench.FairnessOptions
	recovery bench.RecoveryOptions
	cost     bench.CostOptions
	memory   bench.MemoryOptions
	drain    bench.DrainOptions
	gobench  bench.GoBenchOptions
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("sluice-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.run, "run", strings.Join(scenarios, ","), "comma-separated scenarios to run: "+strings.Join(scenarios, ", "))
	fs.BoolVar(&c.long, "long", false, "longer, bigger runs (several times the defaults; about 30 min)")
	fs.BoolVar(&c.sqs, "sqs", false, "also run front door, fairness and recovery on the local SQS server (cost and drain always use it)")
	fs.StringVar(&c.out, "out", "docs/benchmarks.md", "markdown file to write (a relative path is the repository's)")
	fs.StringVar(&c.results, "results", "docs/bench/results.json", "figures kept between runs (a relative path is the repository's)")
	fs.StringVar(&c.plots, "plots", "docs/bench", "directory of the SVG plots (a relative path is the repository's)")
	fs.StringVar(&c.work, "work", "", "scratch directory for binaries, data and logs (default: a new temporary one, removed at the end)")
	fs.BoolVar(&c.keep, "keep", false, "keep the scratch directory (process logs) after the run")
	fs.DurationVar(&c.front.Duration, "frontdoor-duration", 0, "front door: time per measured point (default 3s, -long 10s)")
	fs.DurationVar(&c.fair.Duration, "fairness-duration", 0, "fairness, slow, weights: load time per run (default 8s, -long 60s)")
	fs.Float64Var(&c.fair.QuietRate, "fairness-quiet-rate", 0, "fairness: jobs/s of each quiet tenant (default 20)")
	fs.Float64Var(&c.fair.Spread, "fairness-spread", 0, "fairness: how far each job's service time varies around its mean, as a fraction (default 0.25; negative: none)")
	fs.Float64Var(&c.fair.NoisyRate, "fairness-noisy-rate", 0, "fairness: a noisy tenant's drain rate, jobs/s (default 20); it sends 20× that")
	fs.DurationVar(&c.recovery.Outage, "recovery-outage", 0, "recovery: how long the drainers are stopped (default 15s, -long 120s)")
	fs.Float64Var(&c.recovery.Rate, "recovery-rate", 0, "recovery: total jobs/s submitted throughout (default 300)")
	fs.Float64Var(&c.recovery.Spread, "recovery-spread", 0, "recovery: how far each job's service time varies around its mean, as a fraction (default 0.25; negative: none)")
	fs.DurationVar(&c.recovery.MaxRecovery, "recovery-max", 0, "recovery: longest wait for recovery after the restart (default 60s, -long 300s)")
	fs.DurationVar(&c.cost.Window, "cost-window", 0, "cost: measured steady-state window (default 30s, -long 120s)")
	fs.Float64Var(&c.cost.Rate, "cost-rate", 0, "cost: total jobs/s submitted (default 500)")
	fs.DurationVar(&c.cost.SendLinger, "cost-send-linger", 0, "cost: the processes' --sqs-send-linger in the second run, beside the default's (default 20ms)")
	fs.IntVar(&c.memory.Tenants, "memory-tenants", 0, "memory: active tenants submitting to the gateway (default 100000)")
	fs.IntVar(&c.drain.Concurrency, "drain-concurrency", 0, "drain: the push drainers' slots and the pull worker's credits (default 128; pull is also run with 32)")
	fs.IntVar(&c.drain.Consumers, "drain-consumers", 0, "drain: goroutines of the raw receive+delete measurement, which also runs with 4× as many and keeps the better (default 8)")
	fs.IntVar(&c.drain.Jobs, "drain-jobs", 0, "drain: jobs preloaded and drained (default 100000 embedded, 20000 SQS; -long 5×)")
	fs.StringVar(&c.gobench.Benchtime, "gobench-benchtime", "", "go benchmarks: -benchtime (default 1s, -long 5s)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for s := range strings.SplitSeq(c.run, ",") {
		if !slices.Contains(scenarios, strings.TrimSpace(s)) {
			return c, fmt.Errorf("-run %q: unknown scenario %q (want %s)", c.run, s, strings.Join(scenarios, ", "))
		}
	}
	if c.long {
		c.front.Duration = cmp.Or(c.front.Duration, 10*time.Second)
		c.fair.Duration = cmp.Or(c.fair.Duration, 60*time.Second)
		c.fair.Tail = cmp.Or(c.fair.Tail, 3*time.Minute)
		c.recovery.Outage = cmp.Or(c.recovery.Outage, 120*time.Second)
		c.recovery.MaxRecovery = cmp.Or(c.recovery.MaxRecovery, 300*time.Second)
		c.cost.Window = cmp.Or(c.cost.Window, 120*time.Second)
		c.drain.Scale = 5
		c.gobench.Benchtime = cmp.Or(c.gobench.Benchtime, "5s")
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "bare" {
		fs := flag.NewFlagSet("bare", flag.ContinueOnError)
		listen := fs.String("listen", "127.0.0.1:0", "address to serve the bare ingest API on")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return bench.ServeBare(ctx, *listen, stderr)
	}
	c, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	work := c.work
	if work == "" {
		if work, err = os.MkdirTemp("", "sluice-bench-"); err != nil {
			return err
		}
		if !c.keep {
			defer os.RemoveAll(work)
		}
	}
	started := time.Now()
	machine := testcluster.ReadMachine()
	fmt.Fprintf(stdout, "sluice-bench on %s, load average %s; scratch %s\n", machine, testcluster.LoadAvg(), work)
	env, err := bench.NewEnv(ctx, work, []string{self, "bare"}, stdout)
	if err != nil {
		return err
	}
	defer env.StopSQS()
	// Relative paths are the repository's; absolute ones stay as given.
	c.out, c.results, c.plots = underRoot(env.Root, c.out), underRoot(env.Root, c.results), underRoot(env.Root, c.plots)
	plots := c.plots
	if err := os.MkdirAll(plots, 0o755); err != nil {
		return err
	}
	results, err := bench.LoadResults(c.results)
	if err != nil {
		return err
	}
	rec := bench.NewRecorder(env, results, machine)
	command := func(s string) string {
		cmd := "go run ./bench/cmd/sluice-bench -run " + s
		if c.long {
			cmd += " -long"
		}
		return cmd
	}
	// Plot paths in the docs are relative to the markdown file.
	relPlots, err := filepath.Rel(filepath.Dir(c.out), plots)
	if err != nil {
		return err
	}
	// The fairness scenarios' options on a backend.
	fair := func(backend string) bench.FairnessOptions {
		o := c.fair
		o.Backend, o.Plots, o.RelPlots = backend, plots, relPlots
		return o
	}
	backends := []string{bench.Embedded}
	if c.sqs {
		backends = append(backends, bench.SQS)
	}
	var failed []string
	for _, s := range scenarios {
		if !slices.Contains(strings.Split(c.run, ","), s) || ctx.Err() != nil {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(stdout, "\n== %s (load average %s)\n", s, testcluster.LoadAvg())
		var err error
		switch s {
		case "gobench":
			err = bench.GoBench(ctx, env, rec, c.gobench)
		case "frontdoor":
			for _, b := range backends {
				o := c.front
				o.Backend = b
				err = errors.Join(err, bench.FrontDoor(ctx, env, rec, o, command(s)))
			}
		case "fairness":
			for _, b := range backends {
				err = errors.Join(err, bench.Fairness(ctx, env, rec, fair(b), command(s)))
			}
		case "slow":
			err = bench.SlowTenant(ctx, env, rec, fair(bench.Embedded), command(s))
		case "weights":
			err = bench.Weights(ctx, env, rec, fair(bench.Embedded), command(s))
		case "fairness-starved":
			err = bench.FairnessStarved(ctx, env, rec, fair(bench.Embedded), hogs, command(s))
		case "fairness-pull":
			err = bench.FairnessPull(ctx, env, rec, fair(bench.Embedded), command(s))
		case "pull-stuck":
			err = bench.StuckReader(ctx, env, rec, bench.StuckReaderOptions{}, command(s))
		case "fairness-sqs":
			err = bench.FairnessSQS(ctx, env, rec, fair(bench.SQS), command(s))
		case "recovery", "recovery-starved":
			for _, b := range backends {
				o := c.recovery
				o.Backend, o.Plots, o.RelPlots = b, plots, relPlots
				if s == "recovery-starved" {
					if b != bench.Embedded {
						continue
					}
					o.Hogs = hogs
				}
				err = errors.Join(err, bench.Recovery(ctx, env, rec, o, command(s)))
			}
		case "cost":
			err = bench.Cost(ctx, env, rec, c.cost, command(s))
		case "memory":
			err = bench.Memory(ctx, env, rec, c.memory, command(s))
		case "drain":
			for _, b := range []string{bench.Embedded, bench.SQS} {
				o := c.drain
				o.Backend = b
				err = errors.Join(err, bench.Drain(ctx, env, rec, o, command(s)))
			}
		}
		// A fresh local SQS server per scenario: finished runs' queues
		// would slow it.
		env.StopSQS()
		fmt.Fprintf(stdout, "== %s took %.0fs\n", s, time.Since(t0).Seconds())
		if err != nil {
			fmt.Fprintf(stdout, "== %s failed: %v\n", s, err)
			failed = append(failed, s)
		}
		// Save after each scenario, so an interrupted run keeps what it
		// measured.
		if err := write(c, results, machine, started); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nsluice-bench took %.0fs; wrote %s and %s\n", time.Since(started).Seconds(), c.out, c.plots)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenarios failed: %s (their figures say why)", strings.Join(failed, ", "))
	}
	return nil
}

func write(c config, results *bench.Results, m testcluster.Machine, started time.Time) error {
	if err := results.Save(c.results); err != nil {
		return err
	}
	md := results.Markdown(intro(m, started))
	if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", c.out, err)
	}
	return nil
}

func intro(m testcluster.Machine, started time.Time) string {
	return fmt.Sprintf(`# Benchmarks

Generated by `+"`make bench`"+` (bench/cmd/sluice-bench); edit the harness in bench/, not this
file. The last run started %s on %s (%s).

Every scenario runs the real binaries (cmd/gateway, cmd/drainer, built without -race) on
127.0.0.1 with their own data directories, a real gRPC worker served by the harness, and,
for SQS, the local SQS-compatible server of test/fauxqs. Each figure is, wherever it can be,
a ratio of two things measured side by side in the same run: the machines are shared and
noisy (the load average at each measurement is in the last column), so figures vary from
run to run. The **FIFO baseline** is the same binaries with `+"`--sideline=false`"+` (no spill,
no backlog, no per-tenant drain limits) and one shard per lane chosen by every tenant (no
shuffle-sharding).

Run it all: `+"`make bench`"+` (short, about 15 minutes on 2 cores); longer and bigger:
`+"`make bench-long`"+`; one scenario: `+"`go run ./bench/cmd/sluice-bench -run fairness`"+` (see
`+"`-h`"+` for sizes and durations). A scenario run on its own replaces only its own figures.
`, started.UTC().Format("2006-01-02 15:04 UTC"), m, m.Go)
}

// underRoot is path, or root/path when path is relative.
func underRoot(root, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(root, path)
}
