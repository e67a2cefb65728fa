// Command sluice-reliability runs sluice's reliability suite against the
// real binaries (crash accounting on both backends, backend faults through
// a fault proxy, disk full and read-only, overload, and every fuzz target)
// and writes docs/reliability.md with the figures. `make reliability` runs
// it; -long runs the long version.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/reliability"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-reliability:", err)
		os.Exit(1)
	}
}

// sizes are the knobs of one mode.
type sizes struct {
	crashEmbedded, crashInterval, crashPull, crashSQS reliability.CrashConfig
	faults                                            reliability.FaultConfig
	diskBytes                                         int64
	overload                                          reliability.OverloadConfig
	fuzzTime                                          time.Duration
}

func defaultSizes(long bool) sizes {
	crash := reliability.CrashConfig{
		MinUp: 300 * time.Millisecond, MaxUp: 2500 * time.Millisecond, StartupKills: 0.15, TermShare: 0.1,
		Rate: 300, Callers: 16, Concurrency: 16, DrainTimeout: 3 * time.Minute,
	}
	s := sizes{
		crashEmbedded: crash, crashInterval: crash, crashPull: crash, crashSQS: crash,
		faults:    reliability.FaultConfig{Phase: 8 * time.Second, Rate: 200, Callers: 16, Concurrency: 16, DrainTimeout: 3 * time.Minute},
		diskBytes: 16 << 20,
		overload:  reliability.OverloadConfig{Tenants: 100, SubmitRate: 2, Factor: 10, Duration: 30 * time.Second, Callers: 64, RSSBound: 128 << 20},
		fuzzTime:  10 * time.Second,
	}
	s.crashEmbedded.Backend, s.crashEmbedded.Kills = "embedded", 40
	s.crashInterval.Backend, s.crashInterval.Fsync, s.crashInterval.Kills = "embedded", "interval:10ms", 40
	s.crashPull.Backend, s.crashPull.Pull, s.crashPull.Kills = "embedded", true, 40
	s.crashSQS.Backend, s.crashSQS.Kills = "sqs", 30
	if long {
		s.crashEmbedded.Kills, s.crashInterval.Kills, s.crashPull.Kills, s.crashSQS.Kills = 300, 300, 300, 200
		s.crashPull.DrainTimeout = 20 * time.Minute
		s.crashInterval.DrainTimeout = 20 * time.Minute
		// A sidelined job can be deferred up to 15 minutes (see Findings).
		s.crashEmbedded.DrainTimeout, s.crashSQS.DrainTimeout, s.faults.DrainTimeout = 20*time.Minute, 20*time.Minute, 20*time.Minute
		s.faults.Phase = 40 * time.Second
		s.overload.Tenants, s.overload.SubmitRate, s.overload.Duration = 400, 1, 3*time.Minute
		s.fuzzTime = time.Minute
	}
	return s
}

var scenarios = []string{"crash-embedded", "crash-embedded-interval", "crash-embedded-pull", "crash-sqs", "faults", "disk", "overload", "fuzz"}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sluice-reliability", flag.ContinueOnError)
	long := fs.Bool("long", false, "run the long version (about an hour)")
	out := fs.String("out", "docs/reliability.md", "report to write (empty: none)")
	jsonOut := fs.String("json", "", "also write the raw figures as JSON to this file")
	only := fs.String("only", "", "comma-separated runs to make, of "+strings.Join(scenarios, ", ")+" (default: all)")
	fuzzTime := fs.Duration("fuzztime", 0, "time per fuzz target (default 10s, 1m with -long)")
	keep := fs.Bool("keep", false, "keep the work directory (process logs, data directories)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	sz := defaultSizes(*long)
	if *fuzzTime > 0 {
		sz.fuzzTime = *fuzzTime
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	for s := range want {
		if !slices.Contains(scenarios, s) {
			return fmt.Errorf("-only %q: want some of %s", s, strings.Join(scenarios, ", "))
		}
	}
	runs := func(s string) bool { return len(want) == 0 || want[s] }

	rep := &reliability.Report{
		Started: time.Now(), Mode: "default", Command: "make reliability", GoVer: runtime.Version(),
		Commit: commit(), FuzzTime: sz.fuzzTime,
	}
	if *long {
		rep.Mode, rep.Command = "long", "make reliability LONG=1"
	}
	if len(want) > 0 || *fuzzTime > 0 {
		rep.Command = "go run ./reliability/cmd/sluice-reliability " + strings.Join(args, " ")
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}

	dir, err := os.MkdirTemp("", "sluice-reliability")
	if err != nil {
		return err
	}
	if *keep {
		logf("work directory %s (kept)", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	logf("building the binaries")
	te, err := testcluster.NewEnv(ctx, dir)
	if err != nil {
		return err
	}
	defer te.StopSQS() // started by the first run that needs it
	rep.WorkDir = dir
	env := &reliability.Env{Env: te, Logf: logf}
	fail := func(name string, err error) {
		rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", name, err))
		logf("%s: %v", name, err)
	}

	for _, cfg := range []reliability.CrashConfig{sz.crashEmbedded, sz.crashInterval, sz.crashPull, sz.crashSQS} {
		name := "crash-" + cfg.Backend
		if cfg.Fsync != "" {
			name += "-interval"
		}
		if cfg.Pull {
			name += "-pull"
		}
		if !runs(name) || ctx.Err() != nil {
			continue
		}
		logf("%s: %d kills", name, cfg.Kills)
		res, err := reliability.RunCrash(ctx, env, cfg)
		if res != nil {
			rep.Crash = append(rep.Crash, res)
			logf("%s: %d crashes, %d acked, %d lost, %d duplicates", name, res.Crashes, res.Acked, res.Lost, res.Duplicates)
		}
		if err != nil {
			fail(name, err)
		}
	}
	if runs("faults") && ctx.Err() == nil {
		logf("faults: %s per phase", sz.faults.Phase)
		res, err := reliability.RunFaults(ctx, env, sz.faults)
		rep.Faults = res
		if err != nil {
			fail("faults", err)
		} else {
			logf("faults: %v injected, %d acked, %d lost", res.Injected, res.Acked, res.Lost)
		}
	}
	if runs("disk") && ctx.Err() == nil {
		logf("disk: %d MiB tmpfs", sz.diskBytes>>20)
		res, err := reliability.RunDisk(ctx, env, sz.diskBytes)
		rep.Disk = res
		if err != nil {
			fail("disk", err)
		}
	}
	if runs("overload") && ctx.Err() == nil {
		logf("overload: %d tenants × %g jobs/s, %g× for %s", sz.overload.Tenants, sz.overload.SubmitRate, sz.overload.Factor, sz.overload.Duration)
		res, err := reliability.RunOverload(ctx, env, sz.overload)
		rep.Overload = res
		if err != nil {
			fail("overload", err)
		} else {
			logf("overload: offered %.0f/s, admitted %.0f/s, answers %v, RSS peak %d MiB", res.Offered, res.Admitted, res.Load.Codes, res.RSSPeak>>20)
		}
	}
	if runs("fuzz") && ctx.Err() == nil {
		targets, err := reliability.ListFuzzTargets(ctx)
		if err != nil {
			fail("fuzz", err)
		}
		for _, t := range targets {
			if ctx.Err() != nil {
				break
			}
			res := reliability.RunFuzz(ctx, t, sz.fuzzTime)
			logf("fuzz %s %s: %d execs, failed %t", t.Pkg, t.Name, res.Execs, res.Failed)
			rep.Fuzz = append(rep.Fuzz, res)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	rep.Elapsed = time.Since(rep.Started)
	rep.Machine = reliability.MachineDescription()
	if *out != "" {
		if err := os.WriteFile(*out, []byte(rep.Markdown()), 0o644); err != nil {
			return err
		}
		logf("wrote %s", *out)
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
			return err
		}
	}
	if p := rep.Problems(); len(p) > 0 {
		return fmt.Errorf("%d problems:\n%s", len(p), strings.Join(p, "\n"))
	}
	logf("passed in %s", rep.Elapsed.Round(time.Second))
	return nil
}

// commit names the checked-out commit, with "+changes" if the tree is
// dirty.
func commit() string {
	out, err := exec.Command("git", "-C", testcluster.ModuleDir(), "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", testcluster.ModuleDir(), "status", "--porcelain").Output(); err == nil && len(st) > 0 {
		c += "+changes"
	}
	return c
}
