package bench

import (
	"context"
	"fmt"
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
	if o.Tenants == 0 {
		o.Tenants = 100_000
	}
	if o.Concurrency == 0 {
		o.Concurrency = 64
	}
	fig := Figure{
		ID: "5.gateway-rss", Item: 5, Order: 2, Command: command,
		Name: fmt.Sprintf("Gateway RSS with %s active tenants (embedded backend)", Num(float64(o.Tenants))),
	}
	if err := memory(ctx, env, rec, o, fig); err != nil {
		rec.Fail([]Figure{fig}, err)
		return err
	}
	return nil
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
		return cl.Gateway().RSS()
	}
	idle, err := settle()
	if err != nil {
		return err
	}
	c, err := Dial(cl.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
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
