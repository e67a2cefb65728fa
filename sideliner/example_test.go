package sideliner_test

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/sideliner"
)

func ExamplePolicy_Decide() {
	p := sideliner.Policy{StalenessBound: 5 * time.Minute}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, in := range []sideliner.Input{
		{Now: now, Source: sideliner.SourceShard, EnqueuedAt: now.Add(-time.Second), ReceiveCount: 1},
		{Now: now, Source: sideliner.SourceShard, EnqueuedAt: now.Add(-time.Hour), ReceiveCount: 1},
		{Now: now, Source: sideliner.SourceShard, EnqueuedAt: now.Add(-time.Second), ReceiveCount: 1, TenantOverRate: true},
		{Now: now, Source: sideliner.SourceSpillover, EnqueuedAt: now.Add(-time.Hour), ReceiveCount: 2, TenantOverRate: true},
		{Now: now, Source: sideliner.SourceBacklog, ExpiresAt: now, ReceiveCount: 1},
	} {
		d := p.Decide(in)
		fmt.Println(d.Action, d.Reason, d.Delay)
	}
	// Output:
	// deliver within_limits 0s
	// backlog stale 0s
	// spill over_rate 0s
	// defer over_rate 10s
	// drop ttl_expired 0s
}

func ExamplePolicy_AfterFailure() {
	p := sideliner.Policy{MaxAttempts: 3}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, in := range []sideliner.FailureInput{
		{Now: now, Attempts: 1, Jitter: 0.5},
		{Now: now, Attempts: 2, RetryAfter: time.Minute},
		{Now: now, Attempts: 3},
		{Now: now, Attempts: 1, Class: sideliner.Permanent},
	} {
		d := p.AfterFailure(in)
		fmt.Println(d.Action, d.Reason, d.Delay)
	}
	// Output:
	// retry retryable_failure 2s
	// retry retryable_failure 1m0s
	// dead_letter attempts_exhausted 0s
	// dead_letter permanent_failure 0s
}

func ExampleLimiter_Admit() {
	limits := func(tenant string) sideliner.Limits {
		return sideliner.Limits{DrainRate: 1, DrainBurst: 1, MaxInFlight: 4}
	}
	lim, err := sideliner.NewLimiter(sideliner.LimiterConfig{Limits: limits})
	if err != nil {
		panic(err)
	}
	p := sideliner.Policy{StalenessBound: 5 * time.Minute}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	msg := sideliner.Input{Now: now, Source: sideliner.SourceShard, EnqueuedAt: now, ReceiveCount: 1}

	d, release := lim.Admit(p, "acme", msg)
	fmt.Println(d.Action, d.Reason) // deliver while holding the slot
	defer release()

	d, release = lim.Admit(p, "acme", msg)
	defer release()
	fmt.Println(d.Action, d.Reason) // the bucket is empty: move it aside
	// Output:
	// deliver within_limits
	// spill over_rate
}
