package pull_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/worker"
)

// logLines collects a JSON slog handler's lines.
type logLines struct{ syncbuf.Buffer }

// with returns the WARN lines whose msg starts with prefix.
func (l *logLines) with(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == "WARN" && strings.HasPrefix(m["msg"].(string), prefix) {
			out = append(out, m)
		}
	}
	return out
}

// TestWorkerSaysWhenALeaseTimesOut: a job whose handler outlasts its
// lease fails its attempt and is redelivered; sluice logged it, the
// worker said nothing, while the job burned its attempts. Now the worker
// logs each lease that times out, and each answer sluice refuses because
// it no longer holds the lease, naming the job and how to keep a lease;
// and the handler's ctx says why it ended (ErrLeaseTimedOut).
func TestWorkerSaysWhenALeaseTimesOut(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	var logs logLines
	causes := make(chan error, 10)
	handler := func(ctx context.Context, j worker.Job) error {
		if j.Attempt > 1 {
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		if strings.HasPrefix(j.ID, "late") {
			// Ignores its ctx and acks: sluice refuses the ack.
			time.Sleep(200 * time.Millisecond)
			return nil
		}
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, r.addr, keyAll, handler, worker.ConnectOptions{Concurrency: 2, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Connect: %v", err)
		}
	})
	r.enqueue(t, "std", "slow", 1)
	r.enqueue(t, "std", "late", 1)
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 2 })
	for range 2 {
		if err := <-causes; !errors.Is(err, worker.ErrLeaseTimedOut) {
			t.Errorf("the handler's ctx ended with cause %v, want ErrLeaseTimedOut", err)
		}
	}

	hinted := func(m map[string]any) bool {
		hint, _ := m["hint"].(string)
		return strings.Contains(hint, "worker.Extend") && strings.Contains(hint, "--worker-lease-timeout")
	}
	timedOut := map[string]bool{}
	for _, m := range logs.with(t, "a job's lease timed out") {
		if !hinted(m) || m["attempt"] != 1.0 {
			t.Errorf("lease timeout logged without attempt 1 and the hint: %v", m)
		}
		timedOut[m["job_id"].(string)] = true
	}
	if !timedOut["slow-0"] || !timedOut["late-0"] || len(timedOut) != 2 {
		t.Errorf("lease timeouts logged for %v, want slow-0 and late-0", timedOut)
	}
	// late-0's ack, after its lease, is refused (and its lease-timeout
	// retry too, if sluice timed the lease out first).
	topotest.WaitFor(t, func() bool {
		for _, m := range logs.with(t, "sluice refused an answer") {
			if m["job_id"] == "late-0" {
				return true
			}
		}
		return false
	})
	for _, m := range logs.with(t, "sluice refused") {
		if !hinted(m) {
			t.Errorf("refusal logged without the hint: %v", m)
		}
	}
}
