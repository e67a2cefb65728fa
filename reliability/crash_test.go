package reliability

import (
	"testing"
	"time"
)

// TestCrashAccounting is the short version of the crash run that
// `make reliability` does at length: a few SIGKILLs under load, on each
// backend, and no acknowledged job may be missing at the end.
func TestCrashAccounting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		backend, fsync string
		pull           bool
	}{
		{"embedded", "", false},
		{"embedded", "interval:10ms", false},
		{"embedded", "", true},
		{"sqs", "", false},
	} {
		name := tt.backend
		if tt.fsync != "" {
			name += "/fsync=" + tt.fsync
		}
		if tt.pull {
			name += "/pull"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, err := RunCrash(t.Context(), testEnv(t), CrashConfig{
				Backend: tt.backend, Fsync: tt.fsync, Pull: tt.pull, Kills: 4, MinUp: 500 * time.Millisecond, MaxUp: 1500 * time.Millisecond, StartupKills: 0.25, TermShare: 0.2,
				Rate: 150, Callers: 8, Concurrency: 8, DrainTimeout: 90 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d crashes (%d in start-up, %v), %d graceful restarts, %d jobs submitted, %d acked, %d delivered, %d dead-lettered, %d lost, %d duplicates (bound %d, max %d per job), %d unknown of which %d arrived; drain %s",
				res.Backend, res.Crashes, res.Startups, res.Kills, res.Terms, res.Load.Jobs, res.Acked, res.Delivered, res.DeadLettered, res.Lost,
				res.Duplicates, res.DuplicateBound, res.MaxDeliveries, res.Unknown, res.UnknownArrived, res.Drain)
			if res.Acked == 0 {
				t.Fatal("no job was acknowledged")
			}
			for _, p := range res.Problems {
				t.Error(p)
			}
		})
	}
}
