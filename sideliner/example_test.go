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
		{Now: now, Source: sideliner.SourceShard, EnqueuedAt: now.Add(-time.Second), ReceiveCount: 1, ReadAheadFull: true},
		{Now: now, Source: sideliner.SourceSpillover, EnqueuedAt: now.Add(-time.Hour), ReceiveCount: 2, ReadAheadFull: true},
		{Now: now, Source: sideliner.SourceBacklog, ExpiresAt: now, ReceiveCount: 1},
	} {
		d := p.Decide(in)
		fmt.Println(d.Action, d.Reason, d.Delay)
	}
	// Output:
	// deliver within_limits 0s
	// backlog stale 0s
	// spill read_ahead_full 0s
	// defer read_ahead_full 10s
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
