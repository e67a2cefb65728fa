package drainer

import (
	"log/slog"
	"strings"
	"testing"
)

// TestCreditsOverTheCeilingAreLogged: pull workers granting more credits
// than the drainer's Concurrency get a warning that names both figures,
// once each time the credits go over the ceiling, not at every change.
func TestCreditsOverTheCeilingAreLogged(t *testing.T) {
	t.Parallel()
	tb := setup(t, oneLane)
	var logs strings.Builder // the drainer is not started: only this goroutine logs
	d, err := New(Config{
		Backend: tb.backend, Topology: tb.topo, Handler: newRecorder(), Concurrency: 4,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		credits int
		warned  int // warnings logged so far
	}{
		{3, 0}, {4, 0}, {6, 1}, {8, 1}, {4, 1}, {5, 2}, {0, 2},
	} {
		d.SetCapacity(step.credits, nil)
		got := strings.Count(logs.String(), "grant more credits than the delivery ceiling")
		if got != step.warned {
			t.Fatalf("after %d credits: %d warnings, want %d; logs:\n%s", step.credits, got, step.warned, logs.String())
		}
		if slots, _ := d.Slots(); slots != min(step.credits, 4) {
			t.Fatalf("after %d credits: %d slots, want %d", step.credits, slots, min(step.credits, 4))
		}
	}
	for _, want := range []string{"level=WARN", "credits=6 concurrency=4", "credits=5 concurrency=4", "--concurrency"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs do not say %q:\n%s", want, logs.String())
		}
	}
}
