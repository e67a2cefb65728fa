package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// MemoryOptions configures the gateway RSS scenario (item 5).
type MemoryOptions struct {
	// Tenants configured, each submitting one job. Defaults to 100,000.
	Tenants int
	// Concurrency of the submitting client. Defaults to 64.
	Concurrency int
}

// Memory reads the gateway's RSS with Tenants configured and idle, then
// after each of them has submitted a job (so each has admission state).
func Memory(ctx context.Context, env *Env, rec *Recorder, o MemoryOptions, command string) error {
	o.Tenants = cmp.Or(o.Tenants, 100_000)
	o.Concurrency = cmp.Or(o.Concurrency, 64)
	file := Figure{
		ID: "front.tenant-file-rss", Item: 5, Order: 3, Command: command,
		Name: "Idle gateway RSS with 100,000 configured tenants (the harness's tenant file)",
	}
	fileErr := rec.Measure([]Figure{file}, func() error { return tenantFile(ctx, env, rec, 100_000, file) })
	if fileErr != nil {
		fileErr = fmt.Errorf("tenant file: %w", fileErr)
	}
	fig := Figure{
		ID: "5.gateway-rss", Item: 5, Order: 2, Command: command,
		Name: fmt.Sprintf("Gateway RSS with %s active tenants (embedded backend)", Num(float64(o.Tenants))),
	}
	return errors.Join(fileErr, rec.Measure([]Figure{fig}, func() error { return memory(ctx, env, rec, o, fig) }))
}

// tenantFile starts the gateway with a file of n tenants and reads its
// RSS idle, then while and after the file is reloaded (a changed copy
// renamed over it, as a deployment does; the gateway's watcher reloads
// it). The load and reload times are the gateway's own (load_time of its
// "tenant config loaded" and "tenant config reloaded" log lines).
func tenantFile(ctx context.Context, env *Env, rec *Recorder, n int, fig Figure) error {
	tenants := NewTenants("t", n, Tenant{SubmitRate: 10, SubmitBurst: 10})
	cl, err := env.StartCluster(ctx, ClusterConfig{Name: "tenant-file", Backend: Embedded, Tenants: tenants})
	if err != nil {
		return err
	}
	defer cl.Close()
	gw := cl.Proc("gateway")
	path := filepath.Join(cl.Dir, "tenants.yaml")
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	loaded, err := gw.WaitLog(ctx, "tenant config loaded", time.Minute)
	if err != nil {
		return err
	}
	if !sleepCtx(ctx, 2*time.Second) {
		return ctx.Err()
	}
	idle, err := gw.RSS()
	if err != nil {
		return err
	}

	tenants[n-1].SubmitRate = 11 // a change, so the digest differs
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(TenantsFile(tenants)), 0o600); err != nil {
		return err
	}
	peak := idle
	sample := func() error {
		rss, err := gw.RSS()
		peak = max(peak, rss)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	var reloaded map[string]any
	deadline := time.Now().Add(2 * time.Minute)
	for reloaded == nil {
		if err := sample(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("no reload within 2 minutes of the file's change")
		}
		reloaded, _ = gw.WaitLog(ctx, "tenant config reloaded", 10*time.Millisecond)
	}
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		if err := sample(); err != nil {
			return err
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	after, err := gw.RSS()
	if err != nil {
		return err
	}
	loadTime, reloadTime := logDuration(loaded["load_time"]), logDuration(reloaded["load_time"])
	bound := 64<<20 + 300*int64(n)
	mib := func(b int64) string { return Num(float64(b) / (1 << 20)) }
	fig.Goal = fmt.Sprintf("≤ 64 MiB + 300 B per tenant (%s MiB)", mib(bound))
	fig.Status = AtMost(float64(idle), float64(bound))
	fig.Measured = fmt.Sprintf("%s MiB idle with %s tenants (%s MB file, loaded in %.2f s); reload: %.2f s, RSS peak %s MiB during it and %s MiB 2 s after",
		mib(idle), Num(float64(n)), Num(float64(st.Size())/1e6), loadTime.Seconds(), reloadTime.Seconds(), mib(peak), mib(after))
	rec.Add(fig)
	rec.Detail("tenant-file", 5, "5. Gateway memory with a large tenant file (issue 15, item 6)", fmt.Sprintf(
		"The gateway binary on the embedded backend, no drainers, started with a tenant file of %s tenants as the harness writes it "+
			"(SHA-256 keys, standard tier, two overrides each: %s MB of YAML). VmRSS from /proc/<pid>/status 2 s after the gateway "+
			"logged the file loaded. Then a copy with one tenant changed is renamed over the file; the gateway's file watcher reloads it. "+
			"RSS is sampled every 20 ms from the rename until 2 s after the reload was logged. Load and reload times are the gateway's "+
			"own (read, parse, check), from its log.\n\n%s",
		Num(float64(n)), Num(float64(st.Size())/1e6),
		Table([]string{"", "figure"}, [][]string{
			{"idle RSS", mib(idle) + " MiB (goal ≤ " + mib(bound) + " MiB)"},
			{"load time", fmt.Sprintf("%.2f s", loadTime.Seconds())},
			{"reload time", fmt.Sprintf("%.2f s", reloadTime.Seconds())},
			{"RSS peak during the reload", mib(peak) + " MiB"},
			{"RSS 2 s after the reload", mib(after) + " MiB"},
		})))
	return nil
}

// logDuration reads a slog duration attribute: a string ("1.5s") as the
// binaries log it (serve.NewLogger), or JSON nanoseconds.
func logDuration(v any) time.Duration {
	switch v := v.(type) {
	case string:
		d, _ := time.ParseDuration(v)
		return d
	case float64:
		return time.Duration(v)
	}
	return 0
}

func memory(ctx context.Context, env *Env, rec *Recorder, o MemoryOptions, fig Figure) error {
	tenants := NewTenants("t", o.Tenants, Tenant{SubmitRate: 10, SubmitBurst: 10})
	t0 := time.Now()
	cl, err := env.StartCluster(ctx, ClusterConfig{Name: "memory", Backend: Embedded, Tenants: tenants})
	if err != nil {
		return err
	}
	defer cl.Close()
	env.Logf("  gateway with %s tenants up in %.1fs", Num(float64(o.Tenants)), time.Since(t0).Seconds())
	settle := func() (int64, error) {
		if !sleepCtx(ctx, 2*time.Second) {
			return 0, ctx.Err()
		}
		return cl.Proc("gateway").RSS()
	}
	idle, err := settle()
	if err != nil {
		return err
	}
	c := cl.Client
	var next atomic.Int64
	t1 := time.Now()
	r := ClosedLoop(ctx, o.Concurrency, 0, time.Hour, func(ctx context.Context, _, _ int) (int, error) {
		i := int(next.Add(1)) - 1
		if i >= len(tenants) {
			return 0, errDone
		}
		return 1, c.Submit(ctx, tenants[i])
	})
	if r.OK < len(tenants) {
		return fmt.Errorf("%d of %d tenants submitted: %w", r.OK, len(tenants), r.FirstErr)
	}
	took := time.Since(t1)
	active, err := settle()
	if err != nil {
		return err
	}
	perTenant := float64(active-idle) / float64(o.Tenants)
	fig.Measured = fmt.Sprintf("%s MiB; the same gateway before any tenant submitted, same run: %s MiB (+%s B per active tenant)",
		Num(float64(active)/(1<<20)), Num(float64(idle)/(1<<20)), Num(perTenant))
	fig.Goal = "report (limiter share: ≤ 120 B/tenant)"
	rec.Add(fig)
	rec.Detail("memory", 5, "5. Gateway memory with many tenants", fmt.Sprintf(
		"The gateway binary on the embedded backend without drainers, with a tenant file of %s tenants (SHA-256 keys). "+
			"VmRSS from /proc/<pid>/status 2 s after start (idle: the tenant config loaded, no admission state), then 2 s after "+
			"every tenant submitted one job (%s unary Submits at concurrency %d in %.1f s). The growth is what active tenants "+
			"cost the gateway in all: admission buckets, metrics' tenant tracking, the Go heap's slack.\n\n%s",
		Num(float64(o.Tenants)), Num(float64(o.Tenants)), o.Concurrency, took.Seconds(),
		Table([]string{"state", "RSS"}, [][]string{
			{"idle", Num(float64(idle)/(1<<20)) + " MiB"},
			{"every tenant active", Num(float64(active)/(1<<20)) + " MiB"},
			{"growth per tenant", Num(perTenant) + " B"},
		})))
	return nil
}
