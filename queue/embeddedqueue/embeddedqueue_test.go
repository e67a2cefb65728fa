package embeddedqueue

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/queuetest"
)

func TestMain(m *testing.M) {
	if path := os.Getenv("EMBEDDEDQUEUE_CRASH_CHILD"); path != "" {
		crashChild(path)
		return
	}
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t testing.TB, path string, opts Options) *Backend {
	t.Helper()
	opts.Logger = quiet
	b, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	t.Parallel()
	queuetest.Exercise(t.Context(), t, func(t *testing.T) queue.Backend {
		return open(t, filepath.Join(t.TempDir(), "q.db"), Options{})
	})
}

func TestDurability(t *testing.T) {
	t.Parallel()
	queuetest.ExerciseDurability(t.Context(), t, func(t *testing.T, dir string) queue.Backend {
		return open(t, filepath.Join(dir, "q.db"), Options{})
	})
}

// TestGroupCommit sends from many goroutines at once and checks that they
// shared transactions (fsyncs).
func TestGroupCommit(t *testing.T) {
	t.Parallel()
	b := open(t, filepath.Join(t.TempDir(), "q.db"), Options{})
	defer b.Close()
	ctx := t.Context()
	if err := b.EnsureQueues(ctx, []queue.QueueSpec{{Name: "q"}}); err != nil {
		t.Fatal(err)
	}
	c0, _ := b.CommitStats()
	const senders, each = 64, 10
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for range each {
				if _, err := b.Send(ctx, &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	c1, _ := b.CommitStats()
	commits := c1 - c0
	t.Logf("%d sends in %d commits (%.1f sends per fsync)", senders*each, commits, float64(senders*each)/float64(commits))
	if commits >= senders*each/2 {
		t.Fatalf("%d sends took %d commits; concurrent sends should share them", senders*each, commits)
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b := open(t, filepath.Join(t.TempDir(), "q.db"), Options{Now: clock})
	defer b.Close()
	ctx := t.Context()
	if err := b.EnsureQueues(ctx, []queue.QueueSpec{{Name: "q", Retention: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	send := func(body string) {
		if _, err := b.Send(ctx, &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0", Body: []byte(body)}}}); err != nil {
			t.Fatal(err)
		}
	}
	send("old")
	now.Add(int64(50 * time.Minute))
	send("young")
	now.Add(int64(11 * time.Minute))
	n, err := b.Sweep(ctx)
	if err != nil || n != 1 {
		t.Fatalf("sweep deleted %d (%v), want 1", n, err)
	}
	msgs, err := b.Receive(ctx, &queue.ReceiveParams{Queue: "q", Max: 10})
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "young" {
		t.Fatalf("after sweep: %v %v", msgs, err)
	}
}

func TestSecondProcessRefused(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	b := open(t, path, Options{})
	defer b.Close()
	// bbolt's lock is per open file description, so a second Open in this
	// process contends like another process would.
	_, err := Open(path, Options{Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open: %v", err)
	}
}

func TestClosedCalls(t *testing.T) {
	t.Parallel()
	b := open(t, filepath.Join(t.TempDir(), "q.db"), Options{})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := b.Stats(t.Context(), &queue.StatsParams{}); err == nil {
		t.Fatal("stats after close")
	}
}

// TestCrashLosesNothingAcknowledged runs a child process that sends from
// several goroutines and prints each message as its Send returns, kills
// it with SIGKILL mid-stream, reopens the store and finds every printed
// message.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EMBEDDEDQUEUE_CRASH_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(acked) < 300 {
		acked[sc.Text()] = true
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if len(acked) < 300 {
		t.Fatalf("child acknowledged only %d sends", len(acked))
	}

	b := open(t, path, Options{})
	defer b.Close()
	found := map[string]bool{}
	for {
		msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: "q", Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			found[string(m.Body)] = true
		}
	}
	lost := 0
	for id := range acked {
		if !found[id] {
			lost++
		}
	}
	t.Logf("killed after %d acknowledged sends; %d messages on disk; lost %d", len(acked), len(found), lost)
	if lost > 0 {
		t.Fatalf("%d acknowledged messages lost", lost)
	}
}

func crashChild(path string) {
	b, err := Open(path, Options{Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	if err := b.EnsureQueues(ctx, []queue.QueueSpec{{Name: "q"}}); err != nil {
		os.Exit(2)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				body := fmt.Sprintf("g%02d-%06d", g, i)
				res, err := b.Send(ctx, &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0", Body: []byte(body)}}})
				if err != nil || res[0].Err != nil {
					os.Exit(3)
				}
				mu.Lock()
				fmt.Println(body)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func BenchmarkEmbedded(b *testing.B) {
	queuetest.Benchmark(b, func(b *testing.B) queue.Backend {
		return open(b, filepath.Join(b.TempDir(), "q.db"), Options{})
	})
}
