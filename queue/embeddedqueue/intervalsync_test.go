package embeddedqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-dev/sluice/queue"
)

// countingHandler counts the log records whose message is msg.
type countingHandler struct {
	slog.Handler
	msg string
	n   *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.msg, h.n}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(name), h.msg, h.n}
}

// TestFailedIntervalSyncLeavesNoGap is interval mode's version of
// TestFailedSyncLeavesNoGapBehindLaterSends. An interval sync of the log
// fails (fdatasync on Linux may then mark the dirty pages it could not
// write clean, so they never reach the disk). Later syncs succeed; if
// nothing committed the store, a power loss would keep the later records
// but not the dropped range, and the replay would stop at the gap, losing
// a send answered, and synced, long before the power loss. The failed
// sync commits the store, so every answered send survives.
func TestFailedIntervalSyncLeavesNoGap(t *testing.T) {
	t.Parallel()
	var (
		failNext atomic.Bool
		failFd   atomic.Int64 // the log's descriptor, set before arming
		saved    atomic.Int64 // a dup of it while it is swapped for a pipe
		pipeR    atomic.Int64
		pipeW    atomic.Int64
		failures atomic.Int64
		syncedTo atomic.Int64 // where the last interval sync began
	)
	bun := &bundle{path: filepath.Join(t.TempDir(), "queues.db"), clock: newFakeClock()}
	logger := slog.New(countingHandler{testLogger(t).Handler(), "interval sync failed; committing the store", &failures})
	b, err := open(bun.path, Options{Logger: logger, Clock: bun.clock.Now, SyncInterval: 5 * time.Millisecond}, knobs{
		checkpointEvery: time.Hour, // no checkpoint during the test
		logSynced:       func(_ string, n int64) { syncedTo.Store(n) },
		beforeLogSync: func() {
			if !failNext.CompareAndSwap(true, false) {
				return
			}
			// Make this sync fail as a disk would (EINVAL: fdatasync on a
			// pipe), by putting a pipe under the log's descriptor number.
			fd := int(failFd.Load())
			s, err := unix.Dup(fd)
			if err != nil {
				panic(err)
			}
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				panic(err)
			}
			if err := unix.Dup3(p[0], fd, unix.O_CLOEXEC); err != nil {
				panic(err)
			}
			saved.Store(int64(s))
			pipeR.Store(int64(p[0]))
			pipeW.Store(int64(p[1]))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute})
	sendOne(t, b, "q", "A", 0)
	offA := b.log.off // answered: the writer's writes happened before
	logPath := b.log.f.Name()
	waitUntil(t, "an interval sync of A", func() bool { return syncedTo.Load() >= offA })

	// Armed before B: a sync that began after A's record has ended, and
	// none begins until B's is written, so the next one is B's and no
	// write meets the pipe. Armed after B, a tick could sync B first, and
	// no sync would follow to fail.
	failFd.Store(int64(b.log.f.Fd()))
	failNext.Store(true)
	sendOne(t, b, "q", "B", 0)
	offB := b.log.off
	waitUntil(t, "the failed interval sync", func() bool { return failures.Load() > 0 })
	// Put the log file back under its descriptor before anything is written.
	if err := unix.Dup3(int(saved.Load()), int(failFd.Load()), unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int64{saved.Load(), pipeR.Load(), pipeW.Load()} {
		_ = unix.Close(int(fd))
	}

	sendOne(t, b, "q", "C", 0)
	offC := b.log.off
	// Waiting for C's sync by its offset: a wait for the commit count to
	// grow, read after C was answered, missed a sync that came in between
	// and waited for one that never came (CI, 2026-11-29).
	waitUntil(t, "an interval sync of C", func() bool { return syncedTo.Load() >= offC })
	time.Sleep(50 * time.Millisecond) // ten intervals: C is long answered and synced

	copied := openCopy(t, bun, func(path string, data []byte) []byte {
		if path != logPath {
			return data
		}
		data = data[:min(int64(len(data)), offC)] // synced
		clear(data[offA:offB])                    // the pages the failed sync dropped
		return data
	})
	var got []string
	for _, m := range receive(t, copied, "q", queue.MaxBatch, 0) {
		got = append(got, string(m.Body))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"A", "B", "C"}) {
		t.Fatalf("after a failed interval sync and a power loss %d intervals later, the queue holds %q, want A, B and C", 10, got)
	}
}

// TestFailedCheckpointSyncsTheLogItHeld models a power loss in interval
// mode some intervals after a checkpoint failed (a full disk). A
// checkpoint moves to the next epoch's log before its commit; the
// records of the epoch it holds, written but not yet synced, were to be
// made durable by that commit. It fails, the backend degrades and logs
// nothing more, and the interval syncs go to the next epoch's log: those
// records, answered long before the power loss, must be synced then.
// The send that fills the log past checkpointBytes starts the checkpoint
// on the writer right after its record is written, before any interval
// sync can take it.
func TestFailedCheckpointSyncsTheLogItHeld(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Millisecond
	var (
		mu      sync.Mutex
		durable = map[string]int64{} // per log file: how much a sync made durable
		failed  atomic.Int64
	)
	b, bun := setupWith(t, Options{SyncInterval: interval}, knobs{
		maxSize:         1 << 20, // too small for the checkpoint of the sends below
		checkpointEvery: time.Hour,
		logSynced: func(path string, n int64) {
			mu.Lock()
			defer mu.Unlock()
			durable[path] = n
		},
	})
	b.ObserveCheckpoints(func(_ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		}
	})
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute})
	sendOne(t, b, "q", "A", 0)
	offA := b.log.off // answered: the writer's writes happened before
	logPath := b.log.f.Name()
	waitUntil(t, "an interval sync after A", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return durable[logPath] >= offA
	})

	body := make([]byte, queue.MaxBodyBytes)
	var entries []queue.SendEntry
	for i := range 5 { // 1.25 MiB of log: a checkpoint at once
		entries = append(entries, queue.SendEntry{ID: fmt.Sprint(i), Body: body})
	}
	res, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// A queue change reads the store, so the writer holds it back until
	// the checkpoint has ended; degraded on a full disk, it fails.
	err = b.EnsureQueues(t.Context(), []queue.QueueSpec{{Name: "other"}})
	if !errors.Is(err, queue.ErrUnavailable) || failed.Load() == 0 {
		t.Fatalf("queue change after the checkpoint: %v, %d failed checkpoints; want ErrUnavailable after one", err, failed.Load())
	}
	time.Sleep(10 * interval) // the sends are answered ten intervals before the power loss

	copied := openCopy(t, bun, func(path string, data []byte) []byte {
		if filepath.Ext(path) == ".db" {
			return data // the failed commit wrote nothing
		}
		mu.Lock()
		defer mu.Unlock()
		return data[:min(int64(len(data)), durable[path])]
	})
	if s := stats(t, copied, "q"); s.Visible != 6 {
		t.Fatalf("after a failed checkpoint and a power loss %d intervals later, the queue holds %d messages, want A and the 5 answered after it", 10, s.Visible)
	}
}
