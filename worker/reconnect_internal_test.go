package worker

import (
	"testing"
	"time"
)

// TestReconnectWait: the wait between sessions doubles from 100ms up to
// 3s (it grew to 10s, and a worker found its restarted sluice that much
// late), starts again after a session that held 3s, and not after one
// that failed before its welcome or broke at once (which would reconnect
// ten times a second for ever). Jitter takes up to half of each wait off.
func TestReconnectWait(t *testing.T) {
	t.Parallel()
	type end struct {
		welcomed bool
		lasted   time.Duration
	}
	var (
		failed    = end{false, 0}
		brief     = end{true, time.Second}
		held      = end{true, reconnectMax}
		ms        = time.Millisecond
		noJitter  = func(time.Duration) time.Duration { return 0 }
		allJitter = func(d time.Duration) time.Duration { return d }
	)
	tests := []struct {
		name   string
		ends   []end
		jitter func(time.Duration) time.Duration
		want   []time.Duration
	}{
		{
			"doubles to the cap",
			[]end{failed, failed, failed, failed, failed, failed, failed, failed},
			noJitter,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3 * time.Second, 3 * time.Second, 3 * time.Second},
		},
		{
			"jitter takes up to half off",
			[]end{failed, failed, failed, failed, failed, failed, failed},
			allJitter,
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1500 * ms, 1500 * ms},
		},
		{
			"a session that held starts again",
			[]end{failed, failed, failed, failed, failed, failed, held, failed},
			noJitter,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3 * time.Second, 100 * ms, 200 * ms},
		},
		{
			"a session welcomed and broken at once does not",
			[]end{brief, brief, brief, brief, brief, brief, brief},
			noJitter,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3 * time.Second, 3 * time.Second},
		},
		{
			"a long session never welcomed does not either",
			[]end{failed, failed, failed, {false, time.Minute}},
			noJitter,
			[]time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var w reconnectWait
			for i, e := range tt.ends {
				if got := w.next(e.welcomed, e.lasted, tt.jitter); got != tt.want[i] {
					t.Errorf("wait %d (after welcomed=%v lasted=%v) = %v, want %v", i+1, e.welcomed, e.lasted, got, tt.want[i])
				}
			}
		})
	}
}

// TestJitter: the random part of a wait stays within its bound.
func TestJitter(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if j := jitter(time.Second); j < 0 || j > time.Second {
			t.Fatalf("jitter(1s) = %v, want 0 to 1s", j)
		}
	}
}
