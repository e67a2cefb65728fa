package sideliner

import (
	"testing"
	"time"
)

// TestNoSideline checks the off switch (--sideline=false): every live job
// is delivered whatever its age or its tenant's limits, while the rules
// that protect jobs (malformed, TTL, attempts) still apply.
func TestNoSideline(t *testing.T) {
	t.Parallel()
	off := Policy{StalenessBound: time.Minute, NoSideline: true}
	fresh := Input{Now: t0, Source: SourceShard, EnqueuedAt: t0.Add(-time.Second), ReceiveCount: 1}
	with := func(f func(*Input)) Input { in := fresh; f(&in); return in }
	deliver := Decision{Action: Deliver, Reason: ReasonWithinLimits}

	tests := []struct {
		name string
		in   Input
		want Decision
	}{
		{"fresh", fresh, deliver},
		{"stale from shard", with(func(in *Input) { in.EnqueuedAt = t0.Add(-time.Hour) }), deliver},
		{"over rate from shard", with(func(in *Input) { in.ReadAheadFull = true }), deliver},
		{"at concurrency from shard", with(func(in *Input) { in.ReadAheadFull = true }), deliver},
		{"over rate from spillover, last receive", with(func(in *Input) {
			in.Source, in.ReadAheadFull, in.ReceiveCount = SourceSpillover, true, 5
		}), deliver},
		{"malformed", with(func(in *Input) { in.Malformed = true }), Decision{Action: DeadLetter, Reason: ReasonMalformed}},
		{"expired", with(func(in *Input) { in.ExpiresAt = t0 }), Decision{Action: Drop, Reason: ReasonTTLExpired}},
		{"attempts exhausted", with(func(in *Input) { in.Attempts = 5 }), Decision{Action: DeadLetter, Reason: ReasonAttemptsExhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := off.Decide(tt.in); got != tt.want {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
			on := off
			on.NoSideline = false
			if tt.want.Action == Deliver && tt.in != fresh && on.Decide(tt.in).Action == Deliver {
				t.Errorf("with sidelining on, %s is delivered too: the case tests nothing", tt.name)
			}
		})
	}
}
