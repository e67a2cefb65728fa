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
		{"over rate from shard", with(func(in *Input) { in.TenantOverRate = true; in.TenantWait = time.Second }), deliver},
		{"at concurrency from shard", with(func(in *Input) { in.TenantAtConcurrency = true }), deliver},
		{"over rate from spillover, last receive", with(func(in *Input) {
			in.Source, in.TenantOverRate, in.ReceiveCount = SourceSpillover, true, 5
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

// TestAdmitNoSideline checks that with sidelining off Admit delivers past
// a tenant's drain rate and in-flight limit and consumes nothing, so the
// same tenant is admitted again when sidelining is back on.
func TestAdmitNoSideline(t *testing.T) {
	t.Parallel()
	l, _ := setupLimiter(t, Limits{DrainRate: 1, DrainBurst: 1, MaxInFlight: 1}, 0)
	off := Policy{NoSideline: true}
	in := Input{Now: t0, Source: SourceShard, EnqueuedAt: t0, ReceiveCount: 1}
	for i := range 10 {
		d, release := l.Admit(off, "noisy", in)
		if d.Action != Deliver {
			t.Fatalf("job %d: Admit = %+v, want Deliver with sidelining off", i, d)
		}
		defer release()
	}
	if n := l.Len(); n != 0 {
		t.Errorf("limiter holds state for %d tenants, want none with sidelining off", n)
	}
	d, release := l.Admit(Policy{}, "noisy", in)
	defer release()
	if d.Action != Deliver {
		t.Fatalf("sidelining on: first job = %+v, want Deliver (nothing was consumed while off)", d)
	}
	if d, _ := l.Admit(Policy{}, "noisy", in); d.Action != Spill {
		t.Errorf("sidelining on: second job = %+v, want Spill (over rate and at its in-flight limit)", d)
	}
}
