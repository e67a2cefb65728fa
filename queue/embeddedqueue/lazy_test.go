package embeddedqueue

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// TestOnlySendsWaitForASync: in the default mode a send is answered once
// its record is synced; receives, deletes, visibility changes and moves
// are answered once their record is written, and wait for no sync.
func TestOnlySendsWaitForASync(t *testing.T) {
	t.Parallel()
	b, _ := setupWith(t, Options{}, knobs{checkpointEvery: time.Hour})
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute}, queue.QueueSpec{Name: "side", VisibilityTimeout: time.Minute})
	syncs := func() int64 { return b.CommitStats().Commits }

	before := syncs()
	for _, body := range []string{"a", "b", "c"} {
		sendOne(t, b, "q", body, 0)
	}
	if got := syncs() - before; got != 3 {
		t.Fatalf("3 sends one after the other made %d syncs, want 3", got)
	}

	before = syncs()
	msgs := receive(t, b, "q", 3, 0)
	if len(msgs) != 3 {
		t.Fatalf("received %d, want 3", len(msgs))
	}
	if err := deleteOne(t, b, "q", msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ChangeVisibility(t.Context(), &queue.ChangeVisibilityParams{Queue: "q", Changes: []queue.VisibilityChange{{ReceiptHandle: msgs[1].ReceiptHandle, Timeout: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Move(t.Context(), &queue.MoveParams{From: "q", To: "side", Entries: []queue.MoveEntry{{ReceiptHandle: msgs[2].ReceiptHandle, SendEntry: queue.SendEntry{ID: "0", Body: msgs[2].Body}}}}); err != nil {
		t.Fatal(err)
	}
	if got := syncs() - before; got != 0 {
		t.Fatalf("a receive, a delete, a visibility change and a move made %d syncs, want 0", got)
	}
}

// TestLazyChangesSurviveACrash: a receive, delete, or move answered
// without a sync is in the operating system already, so a crash of the
// process keeps it: a copy of the files as they are, opened without a
// Close, holds it.
func TestLazyChangesSurviveACrash(t *testing.T) {
	t.Parallel()
	b, bun := setupWith(t, Options{}, knobs{checkpointEvery: time.Hour})
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute}, queue.QueueSpec{Name: "side", VisibilityTimeout: time.Minute})
	for _, body := range []string{"acked", "moved", "leased"} {
		sendOne(t, b, "q", body, 0)
	}
	msgs := receive(t, b, "q", 3, 0)
	if len(msgs) != 3 {
		t.Fatalf("received %d, want 3", len(msgs))
	}
	if err := deleteOne(t, b, "q", msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Move(t.Context(), &queue.MoveParams{From: "q", To: "side", Entries: []queue.MoveEntry{{ReceiptHandle: msgs[1].ReceiptHandle, SendEntry: queue.SendEntry{ID: "0", Body: msgs[1].Body}}}}); err != nil {
		t.Fatal(err)
	}

	copied := openCopy(t, bun, func(_ string, data []byte) []byte { return data })
	q, side := stats(t, copied, "q"), stats(t, copied, "side")
	if q.Visible != 0 || q.InFlight != 1 || side.Visible != 1 {
		t.Fatalf("after the crash: q %+v, side %+v; want only \"leased\" in flight in q, \"moved\" in side", q, side)
	}
}

// TestUnsyncedTailIsSyncedBeforeTheNextEpoch models a power loss in the
// default mode while a checkpoint commits. A receive, answered without a
// sync, ends the epoch the checkpoint holds; a send in the next epoch is
// synced and answered. The power loss keeps of each log only what was
// synced. Had the receive's record been left unsynced, the replay would
// stop at the gap it leaves and lose the answered send; the checkpoint
// syncs it first.
func TestUnsyncedTailIsSyncedBeforeTheNextEpoch(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		durable = map[string]int64{} // per log file: how much a sync made durable
		armed   atomic.Bool
	)
	entered, release := make(chan struct{}), make(chan struct{})
	now := make(chan struct{})
	b, bun := setupWith(t, Options{}, knobs{
		checkpointEvery: time.Hour,
		checkpointNow:   now,
		logSynced: func(path string, n int64) {
			mu.Lock()
			defer mu.Unlock()
			durable[path] = n
		},
		beforeCheckpoint: func() {
			if armed.CompareAndSwap(true, false) {
				close(entered)
				<-release
			}
		},
	})
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute})
	sendOne(t, b, "q", "old", 0)
	if got := receive(t, b, "q", 1, 0); len(got) != 1 { // lazy: the epoch's unsynced tail
		t.Fatalf("received %d, want 1", len(got))
	}
	armed.Store(true)
	now <- struct{}{}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint within 10s")
	}
	sendOne(t, b, "q", "new", 0) // the next epoch, synced and answered

	copied := openCopy(t, bun, func(path string, data []byte) []byte {
		if filepath.Ext(path) == ".db" {
			return data // the checkpoint has not committed: the file as it is
		}
		mu.Lock()
		defer mu.Unlock()
		return data[:min(int64(len(data)), durable[path])]
	})
	close(release)
	bun.clock.Advance(2 * time.Minute) // every lease has ended
	msgs := receive(t, copied, "q", queue.MaxBatch, 0)
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Body))
	}
	if len(got) != 2 {
		t.Fatalf("after the power loss the queue holds %q; want \"old\" and the answered \"new\"", got)
	}
}

// openCopy opens a copy of bun's store and its logs, each file's contents
// passed through keep, as a crash or a power loss would leave them, on
// bun's clock, and closes it when the test ends.
func openCopy(t *testing.T, bun *bundle, keep func(path string, data []byte) []byte) *Backend {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "queues.db")
	for _, suffix := range []string{"", ".wal", ".wal.1"} {
		data, err := os.ReadFile(bun.path + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		data = keep(bun.path+suffix, data)
		if err := os.WriteFile(dst+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(dst, Options{Logger: testLogger(t), Clock: bun.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestFailedSyncLeavesNoGapBehindLaterSends models a power loss after a
// failed sync. Linux may mark the pages a failed fdatasync could not
// write clean, so lazy records written before it never reach the disk,
// while the sends answered after it are synced: a replay stops at that
// gap and loses them. After a failed sync the store commits what it holds
// instead, so later sends do not depend on the lost records.
func TestFailedSyncLeavesNoGapBehindLaterSends(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		durable = map[string]int64{}
		failing atomic.Bool
	)
	b, bun := setupWith(t, Options{}, knobs{
		checkpointEvery: time.Hour,
		logSynced: func(path string, n int64) {
			mu.Lock()
			defer mu.Unlock()
			durable[path] = n
		},
		failLogSync: func() error {
			if failing.Load() {
				return errors.New("EIO")
			}
			return nil
		},
	})
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute})
	sendOne(t, b, "q", "old", 0)
	logPath := b.log.f.Name()
	mu.Lock()
	lazyFrom := durable[logPath]
	mu.Unlock()
	if got := receive(t, b, "q", 1, 0); len(got) != 1 { // lazy: written, not synced
		t.Fatalf("received %d, want 1", len(got))
	}
	lazyTo := b.log.off // the writer answered: its writes happened before
	failing.Store(true)
	if _, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0", Body: []byte("refused")}}}); err == nil {
		t.Fatal("a send whose sync failed was answered")
	}
	failing.Store(false)
	sendOne(t, b, "q", "new", 0) // synced and answered

	copied := openCopy(t, bun, func(path string, data []byte) []byte {
		if filepath.Ext(path) == ".db" {
			return data
		}
		mu.Lock()
		defer mu.Unlock()
		data = data[:min(int64(len(data)), durable[path])]
		if path == logPath && int64(len(data)) > lazyFrom {
			clear(data[lazyFrom:min(int64(len(data)), lazyTo)]) // the pages the failed sync dropped
		}
		return data
	})
	bun.clock.Advance(2 * time.Minute) // every lease has ended
	var got []string
	for _, m := range receive(t, copied, "q", queue.MaxBatch, 0) {
		got = append(got, string(m.Body))
	}
	if !slices.Contains(got, "new") || !slices.Contains(got, "old") {
		t.Fatalf("after the power loss the queue holds %q; want \"old\" and the answered \"new\"", got)
	}
}
