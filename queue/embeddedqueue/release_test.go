package embeddedqueue

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/queue"
)

// TestOpenReleasesWhatTheLastProcessHeld: with ReleaseHeld, the messages
// in flight when the store was last closed, or its process died, are
// visible at once when it opens again, their receive counts kept, while delayed messages stay
// delayed, and the release is logged. They waited out their visibility
// timeout, though no process could answer them (found in a walkthrough).
func TestOpenReleasesWhatTheLastProcessHeld(t *testing.T) {
	t.Parallel()
	b, bun := setupWith(t, Options{ReleaseHeld: true}, knobs{})
	spec := queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute}
	mustEnsure(t, b, spec)
	sendOne(t, b, "q", "held", 0)
	sendOne(t, b, "q", "waiting", 0)
	sendOne(t, b, "q", "delayed", 10*time.Minute)
	held := receive(t, b, "q", 1, time.Hour)
	if len(held) != 1 || string(held[0].Body) != "held" {
		t.Fatalf("received %v", held)
	}
	if s := stats(t, b, "q"); s.Visible != 1 || s.InFlight != 1 || s.Delayed != 1 {
		t.Fatalf("before: %+v", s)
	}
	if err := b.Close(); err != nil { // a crash leaves the same state
		t.Fatal(err)
	}

	var logs syncbuf.Buffer
	b, err := Open(bun.path, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Clock: bun.clock.Now, ReleaseHeld: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if s := stats(t, b, "q"); s.Visible != 2 || s.InFlight != 0 || s.Delayed != 1 {
		t.Fatalf("after reopening: %+v, want the held message visible and the delayed one delayed", s)
	}
	if !strings.Contains(logs.String(), "the previous process held in flight") || !strings.Contains(logs.String(), "messages=1") {
		t.Errorf("log:\n%s\nwant the release of 1 message", logs.String())
	}
	got := receive(t, b, "q", 10, time.Minute)
	if len(got) != 2 || string(got[0].Body) != "held" || got[0].ReceiveCount != 2 || string(got[1].Body) != "waiting" || got[1].ReceiveCount != 1 {
		t.Fatalf("received %+v after reopening, want held (its second receive), then waiting", got)
	}
}
