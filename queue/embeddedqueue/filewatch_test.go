package embeddedqueue

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/queue"
)

// TestStoreFileRemovedWhileRunning: once the data directory is removed
// under a running store, new messages are refused with ErrUnavailable
// saying why, the messages held are still received, and Close writes
// the store back, to its path, or beside a file that now stands there;
// the next Open finds the messages.
func TestStoreFileRemovedWhileRunning(t *testing.T) {
	t.Parallel()
	for _, replaced := range []bool{false, true} {
		name := "removed"
		if replaced {
			name = "replaced"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "data")
			path := filepath.Join(dir, "queues.db")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			b, err := open(path, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}, knobs{fileCheckEvery: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
			for _, body := range []string{"held", "waiting"} {
				sendOne(t, b, "q", body, 0)
			}
			held := receive(t, b, "q", 1, 0)
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			if replaced {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte("someone else's"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			waitUntil(t, "the removal seen", func() bool { return b.goneErr() != nil })
			_, sendErr := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "1", Body: []byte("after")}}})
			if !errors.Is(sendErr, queue.ErrUnavailable) || !strings.Contains(sendErr.Error(), path) {
				t.Fatalf("send after the removal: %v, want ErrUnavailable naming %s", sendErr, path)
			}
			if got := receive(t, b, "q", 10, 0); len(got) != 1 || string(got[0].Body) != "waiting" {
				t.Fatalf("received %d after the removal, want the waiting message", len(got))
			}
			if err := deleteOne(t, b, "q", held[0].ReceiptHandle); err != nil {
				t.Fatalf("ack after the removal: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "wrote back") {
				t.Fatalf("log does not say the file went and was written back:\n%s", logged.String())
			}
			restored := path
			if replaced {
				if got, _ := os.ReadFile(path); string(got) != "someone else's" {
					t.Fatal("the file put at the store's path was written over")
				}
				copies, _ := filepath.Glob(path + ".recovered-*")
				if len(copies) != 1 {
					t.Fatalf("copies beside the new file: %v, want one", copies)
				}
				restored = copies[0]
			}
			c, err := Open(restored, Options{Logger: quiet})
			if err != nil {
				t.Fatalf("open the written-back store: %v", err)
			}
			defer c.Close()
			// "waiting" was received above with a lease of an hour: the
			// written-back store keeps that lease, as any restart does.
			if s := stats(t, c, "q"); s.Visible+s.InFlight != 1 {
				t.Fatalf("written-back store holds %+v, want the one message not acked", s)
			}
		})
	}
}

// TestFullStoreLogsCheckpointFailuresSparingly: on a full disk every
// commit fails, and the failure is logged once per ratelog.Every, not
// once per commit (about 20 lines a second onto what is often the same
// disk, found in a filesystem walkthrough).
func TestFullStoreLogsCheckpointFailuresSparingly(t *testing.T) {
	t.Parallel()
	var logged syncbuf.Buffer
	b, err := open(filepath.Join(t.TempDir(), "queues.db"), Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))}, knobs{maxSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var failed atomic.Int64
	b.ObserveCheckpoints(func(_ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		}
	})
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	if _, err := fillStore(t, b, 200); err == nil {
		t.Fatal("the store never filled")
	}
	for range 5 { // each fails to commit, the store being degraded
		_, _ = fillStore(t, b, 1)
	}
	lines := strings.Count(logged.String(), "checkpoint failed")
	if failed.Load() < 2 || lines != 1 {
		t.Fatalf("%d failed checkpoints logged in %d lines, want several in one", failed.Load(), lines)
	}
}
