package embeddedqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

// logRecord builds one redo log record that puts key=value in bucket b.
func logRecord(epoch uint64, key string) []byte {
	changes := appendChange(nil, logPut, []byte("b"), []byte(key), []byte("v"))
	rec := make([]byte, logHeaderLen, logHeaderLen+len(changes))
	binary.BigEndian.PutUint32(rec[0:], uint32(len(changes)))
	binary.BigEndian.PutUint64(rec[8:], epoch)
	rec = append(rec, changes...)
	binary.BigEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], castagnoli))
	return rec
}

// replayInto replays data at epoch into a fresh store with bucket "b" and
// returns the keys it holds afterwards, and the damage the replay found.
func replayInto(t testing.TB, data []byte, epoch uint64) (int, []string, *damagedLog, error) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "replay.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	var keys []string
	var damage *damagedLog
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		if n, _, damage, err = replayLog(tx, data, epoch); err != nil {
			return err
		}
		return b.ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
	})
	return n, keys, damage, err
}

func TestReplayLog(t *testing.T) {
	t.Parallel()
	torn := logRecord(7, "c")
	badCRC := logRecord(7, "c")
	badCRC[len(badCRC)-1] ^= 1
	a := len(logRecord(7, "a"))
	tests := []struct {
		name string
		give [][]byte
		want []string
		// damage: where the replay stopped and the whole record of the
		// epoch after it starts, when one does (-1: none).
		damageAt, damageNext int
	}{
		{"empty", nil, nil, -1, -1},
		{"current epoch in order", [][]byte{logRecord(7, "a"), logRecord(7, "b")}, []string{"a", "b"}, -1, -1},
		{"older records after the current ones end it", [][]byte{logRecord(7, "a"), logRecord(6, "x"), logRecord(6, "y")}, []string{"a"}, -1, -1},
		{"a current record behind an older one", [][]byte{logRecord(7, "a"), logRecord(6, "x"), logRecord(7, "z")}, []string{"a"}, a, 2 * a},
		{"older records first: nothing", [][]byte{logRecord(6, "x"), logRecord(7, "a")}, nil, 0, a},
		{"torn last record", [][]byte{logRecord(7, "a"), torn[:len(torn)-3]}, []string{"a"}, -1, -1},
		{"torn header", [][]byte{logRecord(7, "a"), torn[:5]}, []string{"a"}, -1, -1},
		{"bad checksum ends it, whole records after", [][]byte{logRecord(7, "a"), badCRC, logRecord(7, "d")}, []string{"a"}, a, 2 * a},
		{"bad checksum at the end", [][]byte{logRecord(7, "a"), badCRC}, []string{"a"}, -1, -1},
		{"zeros after the end", [][]byte{logRecord(7, "a"), make([]byte, 64)}, []string{"a"}, -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, keys, damage, err := replayInto(t, bytes.Join(tt.give, nil), 7)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tt.want) || fmt.Sprint(keys) != fmt.Sprint(tt.want) {
				t.Fatalf("replayed %d records, keys %v; want %v", n, keys, tt.want)
			}
			switch {
			case tt.damageAt < 0 && damage != nil:
				t.Fatalf("damage reported at %d (next %d), want none", damage.at, damage.next)
			case tt.damageAt >= 0 && (damage == nil || damage.at != int64(tt.damageAt) || damage.next != int64(tt.damageNext)):
				t.Fatalf("damage %+v, want at %d, next whole record at %d", damage, tt.damageAt, tt.damageNext)
			}
		})
	}
}

// FuzzReplayLog feeds arbitrary logs to the replay: it may refuse a
// record that passes its checksum but does not parse, and must never
// panic or apply a record of another epoch.
func FuzzReplayLog(f *testing.F) {
	f.Add(logRecord(1, "a"))
	f.Add(append(logRecord(1, "a"), logRecord(0, "b")...))
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Reseal the fuzzed tail as one record so the parser, not only the
		// checksum, sees arbitrary changes.
		sealed := make([]byte, logHeaderLen, logHeaderLen+len(data))
		binary.BigEndian.PutUint32(sealed[0:], uint32(len(data)))
		binary.BigEndian.PutUint64(sealed[8:], 1)
		sealed = append(sealed, data...)
		binary.BigEndian.PutUint32(sealed[4:], crc32.Checksum(sealed[8:], castagnoli))
		for _, give := range [][]byte{data, sealed} {
			n, _, _, err := replayInto(t, give, 1)
			if err == nil && n > 1 {
				t.Fatalf("%d records applied from %d bytes", n, len(give))
			}
			if _, _, _, err := replayInto(t, give, 2); err != nil {
				t.Fatalf("a log of epoch 1 replayed at epoch 2: %v", err)
			}
		}
	})
}

// crashCopy copies the store and its redo logs as the operating system
// holds them now, as a crash of the process would leave them, and opens
// the copy in the default mode with clock.
func crashCopy(t *testing.T, path string, clock func() time.Time) *Backend {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "queues.db")
	for _, suffix := range []string{"", ".wal", ".wal.1"} {
		data, err := os.ReadFile(path + suffix)
		if errors.Is(err, fs.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Open(dst, Options{Logger: testLogger(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestCheckpointBesideTheWriter holds a checkpoint's commit. Sends and
// deletes are answered meanwhile, and so is a receive of a message the
// checkpoint holds (read from memory), while a receive that must read
// the store waits for the commit to end. A copy of the files taken while
// the commit is held (a store file without the checkpoint) holds every
// answered change: the copy replays both logs.
func TestCheckpointBesideTheWriter(t *testing.T) {
	t.Parallel()
	first, bun := setupWith(t, Options{}, knobs{})
	mustEnsure(t, first, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour}, queue.QueueSpec{Name: "q2", VisibilityTimeout: time.Hour})
	sendOne(t, first, "q", "leased", 0)
	leased := receive(t, first, "q", 1, 0)
	sendOne(t, first, "q", "old", 0)
	if err := first.Close(); err != nil { // "old" is in the store file alone now
		t.Fatal(err)
	}

	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	b, err := open(bun.path, Options{Logger: testLogger(t), Clock: bun.clock.Now}, knobs{beforeCheckpoint: func() {
		if armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	armed.Store(true)
	sendOne(t, b, "q2", "before", 0)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint within 10s")
	}

	for i := range 3 {
		sendOne(t, b, "q", fmt.Sprint("during-", i), 0)
	}
	if err := deleteOne(t, b, "q", leased[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b, "q2", 1, 0); len(got) != 1 || string(got[0].Body) != "before" {
		t.Fatalf("receive of a message the checkpoint holds: %v, want \"before\"", got)
	}
	type received struct {
		msgs []queue.Message
		err  error
	}
	got := make(chan received, 1)
	go func() {
		msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: "q", Max: 1})
		got <- received{msgs, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("a receive that reads the store was answered while the checkpoint committed: %v", r)
	case <-time.After(50 * time.Millisecond):
	}
	copied := crashCopy(t, bun.path, bun.clock.Now)
	close(release)

	r := <-got
	if r.err != nil || len(r.msgs) != 1 || string(r.msgs[0].Body) != "old" {
		t.Fatalf("receive after the checkpoint: %v, want message \"old\"", r)
	}
	if s := stats(t, b, "q"); s.Visible != 3 || s.InFlight != 1 {
		t.Fatalf("after the checkpoint: %+v, want 3 visible and 1 leased", s)
	}
	for _, tt := range []struct {
		queue             string
		visible, inFlight int64
	}{{"q", 4, 0}, {"q2", 0, 1}} {
		if s := stats(t, copied, tt.queue); s.Visible != tt.visible || s.InFlight != tt.inFlight {
			t.Errorf("copy taken during the checkpoint, queue %s: %+v, want %d visible and %d in flight", tt.queue, s, tt.visible, tt.inFlight)
		}
	}
}

// TestIntervalAnswersFromTheLog runs interval mode with an interval that
// never passes: nothing is committed, yet a copy of the files, as a
// process crash leaves them, holds every answered change: queues, sends,
// leases, deletes.
func TestIntervalAnswersFromTheLog(t *testing.T) {
	t.Parallel()
	b, bun := setupWith(t, Options{SyncInterval: time.Hour}, knobs{})
	mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
	for i := range 5 {
		sendOne(t, b, "q", fmt.Sprint("m", i), 0)
	}
	leased := receive(t, b, "q", 2, 0)
	if err := deleteOne(t, b, "q", leased[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if c := b.CommitStats().Commits; c != 0 {
		t.Fatalf("%d commits within the interval, want none", c)
	}

	copied := crashCopy(t, bun.path, bun.clock.Now)
	if s := stats(t, copied, "q"); s.Visible != 3 || s.InFlight != 1 {
		t.Fatalf("copy after a crash: %+v, want 3 visible and 1 leased", s)
	}
	if err := deleteOne(t, copied, "q", leased[1].ReceiptHandle); err != nil {
		t.Fatalf("the lease taken before the crash: %v", err)
	}
}

// TestIntervalCommits sends from many goroutines with a short interval:
// the sends share few syncs, and once a checkpoint has passed, the store
// file alone holds them.
func TestIntervalCommits(t *testing.T) {
	t.Parallel()
	b, bun := setupWith(t, Options{SyncInterval: 5 * time.Millisecond}, knobs{})
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	const senders, each = 16, 20
	done := make(chan struct{})
	go func() {
		defer close(done)
		for g := range senders {
			for i := range each {
				sendOne(t, b, "q", fmt.Sprint(g, "-", i), 0)
			}
		}
	}()
	<-done
	after := b.CommitStats()
	t.Logf("%d operations, %d syncs", after.Ops, after.Commits)
	if after.Commits >= senders*each/2 {
		t.Fatalf("%d sends took %d syncs; they should share them", senders*each, after.Commits)
	}

	// A checkpoint follows within 50 ms, or two if the first was under
	// way when the last sends came: then the store file alone, without
	// the logs, holds every send.
	storeAlone := func() int64 {
		dst := filepath.Join(t.TempDir(), "queues.db")
		data, err := os.ReadFile(bun.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o600); err != nil {
			t.Fatal(err)
		}
		copied, err := Open(dst, Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer copied.Close()
		s, err := copied.Stats(t.Context(), &queue.StatsParams{Queues: []string{"q"}})
		if err != nil {
			return -1 // not even the queue yet
		}
		return s[0].Visible
	}
	waitUntil(t, "store file holding every send", func() bool { return storeAlone() == senders*each })
}

// TestFullStore fills a size-capped store in each mode. The checkpoint
// fails, the backend then commits every call and refuses what does not
// fit with ErrUnavailable, and a reopen without the cap finds every
// answered send: the log kept them.
// TestIntervalSyncBesideTheWriter holds interval mode's log sync and
// checks that sends are answered meanwhile and that no second sync starts
// while one runs; once it is let go, the next records get a sync of
// their own.
func TestIntervalSyncBesideTheWriter(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 16), make(chan struct{})
	b, _ := setupWith(t, Options{SyncInterval: time.Millisecond}, knobs{beforeLogSync: func() {
		entered <- struct{}{}
		<-release
	}})
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	sent := 0
	// untilSynced sends until a sync starts. A checkpoint that comes
	// before the next tick makes the records durable itself, and then no
	// sync follows them: under load both tickers are often due at once.
	untilSynced := func(what string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			sendOne(t, b, "q", fmt.Sprint(what, "-", sent), 0)
			sent++
			select {
			case <-entered:
				return
			case <-deadline:
				t.Fatalf("no sync %s", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	untilSynced("first") // a sync is held
	for i := range 20 {
		sendOne(t, b, "q", fmt.Sprint("during-", i), 0) // answered while it is
		sent++
	}
	time.Sleep(10 * time.Millisecond) // ten ticks
	if n := len(entered); n != 0 {
		t.Fatalf("%d more syncs started while one was under way", n)
	}
	close(release)
	untilSynced("after the held one ended")
	if s := stats(t, b, "q"); s.Visible != int64(sent) {
		t.Fatalf("%d visible, want %d", s.Visible, sent)
	}
}

func TestFullStore(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			b, bun := setupWith(t, m.opts, knobs{maxSize: 4 << 20})
			var ok, failed atomic.Int64
			b.ObserveCheckpoints(func(took time.Duration, err error) {
				if err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			})
			mustEnsure(t, b, queue.QueueSpec{Name: "q"})
			stored, failure := fillStore(t, b, 200)
			t.Logf("answered %d sends before: %v; checkpoints %d ok, %d failed", stored, failure, ok.Load(), failed.Load())
			if failed.Load() == 0 {
				t.Error("ObserveCheckpoints saw no failed checkpoint on the full store")
			}
			if s := stats(t, b, "q"); s.Visible != int64(stored) {
				t.Fatalf("%d visible after the failed checkpoint, want %d", s.Visible, stored)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b2, err := Open(bun.path, Options{Logger: testLogger(t), Clock: bun.clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer b2.Close()
			if s := stats(t, b2, "q"); s.Visible != int64(stored) {
				t.Fatalf("after reopen %d visible, want %d", s.Visible, stored)
			}
		})
	}
}

func TestSyncIntervalValidated(t *testing.T) {
	t.Parallel()
	_, err := Open(filepath.Join(t.TempDir(), "queues.db"), Options{SyncInterval: -time.Second})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("sync interval -1s is negative")) {
		t.Fatalf("negative sync interval: %v", err)
	}
}

// TestTornEpochEndsTheReplay models a power loss in interval mode while a
// checkpoint commits: the records of the epoch the checkpoint holds were
// written but never synced, and are lost, while the next epoch's, written
// after them, reached the disk (an interval sync during the commit, or
// the page cache's own writeback). Here the next epoch leases a message
// whose send was in the lost one. Replayed over the gap, that lease made
// a state with no body, and every receive that reached it failed. The
// copy must open to a state all of which can be received: the store file
// as it was, since the next epoch does not follow on from what is left.
func TestTornEpochEndsTheReplay(t *testing.T) {
	t.Parallel()
	first, bun := setupWith(t, Options{}, knobs{})
	mustEnsure(t, first, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Minute})
	sendOne(t, first, "q", "old", 0)
	receive(t, first, "q", 1, 0) // leased, so the receive below takes "new"
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	var armed atomic.Bool
	var lostLog string // the log of the epoch the held checkpoint commits
	entered, release := make(chan struct{}), make(chan struct{})
	var b *Backend
	// An interval of 60 ms: a checkpoint every 60 ms and no sync between.
	b, err := open(bun.path, Options{Logger: testLogger(t), Clock: bun.clock.Now, SyncInterval: 60 * time.Millisecond}, knobs{beforeCheckpoint: func() {
		if armed.CompareAndSwap(true, false) {
			lostLog = b.logs[(b.epoch-1)%2].f.Name() // the writer waits for this checkpoint before it moves the epoch again
			close(entered)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	armed.Store(true)
	sendOne(t, b, "q", "new", 0)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint within 10s")
	}
	if got := receive(t, b, "q", 1, 0); len(got) != 1 || string(got[0].Body) != "new" {
		t.Fatalf("receive during the checkpoint: %v, want \"new\"", got)
	}

	// The power loss: the store file without the checkpoint, the log it
	// commits lost, the next one on disk.
	dst := filepath.Join(t.TempDir(), "queues.db")
	for _, suffix := range []string{"", ".wal", ".wal.1"} {
		data, err := os.ReadFile(bun.path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if bun.path+suffix == lostLog {
			data = nil
		}
		if err := os.WriteFile(dst+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	copied, err := Open(dst, Options{Logger: testLogger(t), Clock: bun.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer copied.Close()
	bun.clock.Advance(2 * time.Minute) // every lease has ended
	s := stats(t, copied, "q")
	msgs, err := copied.Receive(t.Context(), &queue.ReceiveParams{Queue: "q", Max: queue.MaxBatch})
	if err != nil {
		t.Fatalf("receive after the power loss (stats %+v): %v", s, err)
	}
	if len(msgs) != 1 || string(msgs[0].Body) != "old" || s.Visible != 1 {
		t.Fatalf("after the power loss: %d messages %v, stats %+v; want \"old\" alone", len(msgs), msgs, s)
	}
}

// firstOfEpoch is logRecord for the first record of an epoch, which
// says where the records of the epoch before ended.
func firstOfEpoch(epoch uint64, prevEnd int, key string) []byte {
	changes := appendChange(appendPrevEnd(nil, int64(prevEnd)), logPut, []byte("b"), []byte(key), []byte("v"))
	rec := make([]byte, logHeaderLen, logHeaderLen+len(changes))
	binary.BigEndian.PutUint32(rec[0:], uint32(len(changes)))
	binary.BigEndian.PutUint64(rec[8:], epoch)
	rec = append(rec, changes...)
	binary.BigEndian.PutUint32(rec[4:], crc32.Checksum(rec[8:], castagnoli))
	return rec
}

// TestReplayEpochs replays the logs of two epochs, 7 and 8, as Open and
// a rebuild do. The first record of epoch 8 says where epoch 7's records
// end: records of 7 found past that are the leftovers of an append that
// failed (its group was refused, and the log's end set back), which are
// not replayed while 8's are; records of 7 that end short of it leave a
// gap, after which 8's are not replayed.
func TestReplayEpochs(t *testing.T) {
	t.Parallel()
	a, b := logRecord(7, "a"), logRecord(7, "b")
	cat := func(recs ...[]byte) []byte { return bytes.Join(recs, nil) }
	for _, tt := range []struct {
		name  string
		files [2][]byte
		want  []string
	}{
		{"both whole", [2][]byte{cat(a, b), firstOfEpoch(8, len(a)+len(b), "c")}, []string{"a", "b", "c"}},
		{"files either way round", [2][]byte{firstOfEpoch(8, len(a)+len(b), "c"), cat(a, b)}, []string{"a", "b", "c"}},
		{"a failed append's leftover", [2][]byte{cat(a, b), firstOfEpoch(8, len(a), "c")}, []string{"a", "c"}},
		{"tail lost", [2][]byte{a, firstOfEpoch(8, len(a)+len(b), "c")}, []string{"a"}},
		{"all lost", [2][]byte{nil, cat(firstOfEpoch(8, len(a), "c"), logRecord(8, "d"))}, nil},
		{"no mark (an older build)", [2][]byte{a, logRecord(8, "c")}, []string{"a", "c"}},
		{"no next epoch", [2][]byte{cat(a, b), logRecord(6, "z")}, []string{"a", "b"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "replay.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var keys []string
			err = db.Update(func(tx *bolt.Tx) error {
				for _, name := range [][]byte{[]byte("b"), metaBucket} {
					if _, err := tx.CreateBucket(name); err != nil {
						return err
					}
				}
				if _, _, err := replayEpochs(tx, tt.files, 7, quiet); err != nil {
					return err
				}
				return tx.Bucket([]byte("b")).ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(keys, tt.want) {
				t.Fatalf("replayed %q, want %q", keys, tt.want)
			}
		})
	}
}
