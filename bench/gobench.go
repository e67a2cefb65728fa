package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// BenchResult is one line of `go test -bench` output: a benchmark's name
// (without the -GOMAXPROCS suffix) and its metrics by unit.
type BenchResult struct {
	Name    string
	Metrics map[string]float64
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.+)$`)

// ParseGoBench reads the result lines of `go test -bench` output,
// whatever metrics they report (b.ReportMetric units included).
func ParseGoBench(out string) []BenchResult {
	var rs []BenchResult
	for line := range strings.SplitSeq(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		r := BenchResult{Name: m[1], Metrics: map[string]float64{}}
		f := strings.Fields(m[3])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			r.Metrics[f[i+1]] = v
		}
		rs = append(rs, r)
	}
	return rs
}

// pick returns the results reporting unit whose name matches re, the one
// with the best value first (lowest when lower is better).
func pick(rs []BenchResult, unit string, re *regexp.Regexp, lowerBetter bool) []BenchResult {
	var out []BenchResult
	for _, r := range rs {
		if _, ok := r.Metrics[unit]; ok && re.MatchString(r.Name) {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b BenchResult) int {
		if lowerBetter {
			return cmp.Compare(a.Metrics[unit], b.Metrics[unit])
		}
		return cmp.Compare(b.Metrics[unit], a.Metrics[unit])
	})
	return out
}

// GoBenchOptions configures the Go benchmark scenario.
type GoBenchOptions struct {
	// Benchtime is go test's -benchtime. Defaults to 1s.
	Benchtime string
}

// GoBenchCommand is the command GoBench runs, for the docs.
func GoBenchCommand(o GoBenchOptions) []string {
	return []string{
		"go", "test", "-run", "^$", "-bench", "Admission|Embedded", "-benchtime", cmp.Or(o.Benchtime, "1s"),
		"-cpu", "2", "-count", "1", "-p", "1", "./gateway/", "./queue/embeddedqueue/",
	}
}

// GoBench runs the admission (item 5) and embedded backend (item 7) Go
// benchmarks and records their figures; a benchmark that is missing is
// recorded as not measured.
func GoBench(ctx context.Context, env *Env, rec *Recorder, o GoBenchOptions) error {
	args := GoBenchCommand(o)
	command := shellJoin(args)
	figs := []Figure{
		{ID: "5.limiter-bytes", Item: 5, Order: 1, Name: "Limiter state per tenant, 1,000,000 tenants", Goal: "≤ 120 B/tenant"},
		{ID: "5.decision-ns", Item: 5, Order: 3, Name: "Admission decision (lookup + bucket), 2 goroutines over 100k tenants", Goal: "≤ 300 ns"},
		{ID: "7.enqueue", Item: 7, Order: 1, Name: "Embedded durable enqueue with group commit, 1 KiB", Goal: "≥ 40,000 jobs/s"},
		{ID: "7.claim-ack", Item: 7, Order: 2, Name: "Embedded claim+ack with batched claims, 1 KiB", Goal: "≥ 20,000 jobs/s"},
	}
	for i := range figs {
		figs[i].Command = command
	}
	env.Logf("running %s", command)
	start := time.Now()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = env.Root
	out, err := cmd.CombinedOutput()
	env.Logf("go benchmarks took %.0fs", time.Since(start).Seconds())
	if err != nil {
		rec.Fail(figs, fmt.Errorf("%w: %s", err, lastLines(string(out), 5)))
		return fmt.Errorf("go benchmarks: %w\n%s", err, out)
	}
	rs := ParseGoBench(string(out))
	baseline := regexp.MustCompile(`rate\.Limiter`)

	// Item 5: sluice's limiter next to the rate.Limiter map baseline.
	limiter := func(f Figure, unit, label string, goal float64) {
		var ours, base []BenchResult
		for _, r := range pick(rs, unit, regexp.MustCompile(`Admission`), true) {
			if baseline.MatchString(r.Name) {
				base = append(base, r)
			} else {
				ours = append(ours, r)
			}
		}
		if len(ours) == 0 {
			f.Measured, f.Status = "not measured: no Admission benchmark reports "+unit, NotMeasured
			rec.Add(f)
			return
		}
		v := ours[0].Metrics[unit]
		f.Measured = fmt.Sprintf("%s %s (%s)", Num(v), label, ours[0].Name)
		if len(base) > 0 {
			b := base[0].Metrics[unit]
			f.Measured += fmt.Sprintf("; map of rate.Limiter, same run: %s %s (%.2f×)", Num(b), label, v/b)
		}
		f.Status = AtMost(v, goal)
		rec.Add(f)
	}
	limiter(figs[0], "B/tenant", "B/tenant", 120)
	limiter(figs[1], "ns/decision", "ns", 300)

	// Item 7: the best of the backend benchmark's send and receive+delete
	// runs, next to the single-writer send for scale.
	rec.Add(enqueueFigure(figs[2], rs))
	rec.Add(backendFigure(figs[3], rs, `Embedded.*/receive\+delete/`, 20000, func(BenchResult) string { return "" }))

	var rows [][]string
	for _, r := range rs {
		var ms []string
		for _, unit := range []string{"B/tenant", "ns/decision", "jobs/s", "p50-µs", "p99-µs", "p99.9-µs", "ns/op"} {
			if v, ok := r.Metrics[unit]; ok && !math.IsNaN(v) {
				ms = append(ms, Num(v)+" "+unit)
			}
		}
		rows = append(rows, []string{r.Name, strings.Join(ms, ", ")})
	}
	rec.Detail("gobench", 5, "5 and 7. Go benchmarks: admission limiter and embedded backend",
		fmt.Sprintf("```sh\n%s\n```\n\n%s", command, Table([]string{"benchmark", "metrics"}, rows)))
	return nil
}

// backendFigure fills f from the result of rs with the most jobs/s among
// those whose name matches re, against goal; context adds to the text.
func backendFigure(f Figure, rs []BenchResult, re string, goal float64, context func(best BenchResult) string) Figure {
	best := pick(rs, "jobs/s", regexp.MustCompile(re), false)
	if len(best) == 0 {
		f.Measured, f.Status = "not measured: no benchmark matching "+re, NotMeasured
		return f
	}
	v := best[0].Metrics["jobs/s"]
	f.Measured = fmt.Sprintf("%s jobs/s (%s)%s", Num(v), best[0].Name, context(best[0]))
	f.Status = AtLeast(v, goal)
	return f
}

// enqueueFigure fills item 7's enqueue figure: the best durable send run
// (fsync=always: answered once on disk; fsync=interval answers before the
// sync) of the embedded backend's benchmark, next to the single-writer
// send of the same mode and size.
func enqueueFigure(f Figure, rs []BenchResult) Figure {
	return backendFigure(f, rs, `^BenchmarkEmbedded/fsync=always/send/.*concurrency=`, 40000, func(best BenchResult) string {
		var extra string
		prefix, _, _ := strings.Cut(best.Name, "concurrency=")
		if one := pick(rs, "jobs/s", regexp.MustCompile("^"+regexp.QuoteMeta(prefix)+"concurrency=1$"), false); len(one) > 0 {
			extra = fmt.Sprintf("; one writer, same run: %s jobs/s", Num(one[0].Metrics["jobs/s"]))
		}
		return extra + sendLatency(rs)
	})
}

// sendLatency describes the enqueue figure's companion, the latency of
// single sends offered at the goal's rate (BenchmarkEmbeddedSendLatency),
// in each durability mode it finds.
func sendLatency(rs []BenchResult) string {
	var modes []string
	for _, r := range rs {
		mode, ok := strings.CutPrefix(r.Name, "BenchmarkEmbeddedSendLatency/")
		p50, ok50 := r.Metrics["p50-µs"]
		p99, ok99 := r.Metrics["p99-µs"]
		if ok && ok50 && ok99 {
			modes = append(modes, fmt.Sprintf("%s p50 %s, p99 %s", mode, Ms(time.Duration(p50)*time.Microsecond), Ms(time.Duration(p99)*time.Microsecond)))
		}
	}
	if len(modes) == 0 {
		return ""
	}
	return "; single sends offered at 40,000/s, same run: " + strings.Join(modes, "; ")
}

// shellJoin joins args into a command a shell runs as is.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if strings.ContainsAny(a, "^$|*?[]()<>&;'\" \\") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
