package embeddedqueue

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

// storeWithOneJob makes a store at path holding one visible message in
// queue q, closed, with its meta bucket's format set to stamp (none: the
// meta bucket removed, as builds before format 1 left it).
func storeWithOneJob(t *testing.T, path, stamp string) {
	t.Helper()
	// A store of an older format has records without a checksum.
	b, err := open(path, Options{Logger: quiet}, knobs{legacyRecords: stamp != format})
	if err != nil {
		t.Fatal(err)
	}
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	sendOne(t, b, "q", "accepted before the upgrade", 0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		if stamp == "none" {
			return tx.DeleteBucket(metaBucket)
		}
		return tx.Bucket(metaBucket).Put(formatKey, []byte(stamp))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func stampOf(t *testing.T, path string) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got string
	_ = db.View(func(tx *bolt.Tx) error {
		if m := tx.Bucket(metaBucket); m != nil {
			got = string(m.Get(formatKey))
		}
		return nil
	})
	return got
}

// TestFormatStamp: a store of the format before this build's is upgraded
// in place at Open, its jobs kept, with a log line; builds of that format
// refuse the new stamp. One of another format (a newer build's, or from
// before formats were stamped) is refused with what to do, and left as
// it was. Format 1 covered layouts its own builds could not read (found
// in an upgrade walkthrough: a downgrade ignored idempotency keys and lost
// a redo log's jobs, without a word).
func TestFormatStamp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stamp     string
		refused   string // what the error must say; "" opens
		stampThen string
	}{
		{stamp: format, stampThen: format},
		{stamp: "2", stampThen: format},
		{stamp: "1", stampThen: format},
		{stamp: "4", refused: `store format "4", this build reads "3" (and upgrades "2" and "1"): a newer sluice wrote it`, stampThen: "4"},
		{stamp: "none", refused: "unversioned format", stampThen: ""},
	} {
		t.Run(tc.stamp, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "queues.db")
			storeWithOneJob(t, path, tc.stamp)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			b, err := Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if tc.refused != "" {
				if err == nil {
					_ = b.Close()
					t.Fatalf("format %q opened, want it refused", tc.stamp)
				}
				if !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("error %q, want it to say %q", err, tc.refused)
				}
				if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
					t.Fatal("a refused store was changed")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				msgs := receive(t, b, "q", 10, 0)
				if len(msgs) != 1 || string(msgs[0].Body) != "accepted before the upgrade" {
					t.Fatalf("after opening format %q: %d messages, want the one accepted before", tc.stamp, len(msgs))
				}
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				upgraded := strings.Contains(logged.String(), "store format upgraded")
				if upgraded != (tc.stamp != format) {
					t.Fatalf("format %q: upgrade logged %v; log:\n%s", tc.stamp, upgraded, logged.String())
				}
			}
			if got := stampOf(t, path); got != tc.stampThen {
				t.Fatalf("stamp after Open %q, want %q", got, tc.stampThen)
			}
		})
	}
}

// TestLostStoreBesideItsLogIsRefused: a store file deleted or emptied
// while its redo log remains is refused at Open, saying what to do, and
// the log is left as it was; a fresh directory, or one whose logs were
// moved aside, opens empty.
func TestLostStoreBesideItsLogIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want string
		lose       func(path string) error
	}{
		{"deleted", "is missing", os.Remove},
		{"emptied", "is empty", func(path string) error { return os.Truncate(path, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "queues.db")
			storeWithOneJob(t, path, format)
			logs := logPaths(path)
			var full string // the log the epoch used (drawn at random)
			var before []byte
			for _, p := range logs {
				if data, _ := os.ReadFile(p); len(data) > len(before) {
					full, before = p, data
				}
			}
			if len(before) < logHeaderLen {
				t.Fatalf("redo logs after a close: %d bytes at most; the test needs one with records", len(before))
			}
			if err := tc.lose(path); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path, Options{Logger: quiet})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "move "+logs[0]+" and "+logs[1]+" aside") {
				t.Fatalf("Open with the store %s: %v, want a refusal saying it %s and what to move aside", tc.name, err, tc.want)
			}
			if after, _ := os.ReadFile(full); !bytes.Equal(before, after) {
				t.Fatal("the refused Open changed the redo log")
			}
			for _, p := range logs {
				if err := os.Rename(p, p+".aside"); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			b, err := Open(path, Options{Logger: quiet})
			if err != nil {
				t.Fatalf("Open with the logs moved aside: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDamagedLogIsReportedAndKept: a redo log whose first record was
// changed on disk, with whole records after it, replays up to the damage
// (it cannot tell a change from a power loss's unsynced tail), says so at
// ERROR with where, and keeps a copy of the log as it found it before the
// log is written over.
func TestDamagedLogIsReportedAndKept(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queues.db")
	// An interval this long leaves the records in the log: no checkpoint.
	b, err := Open(path, Options{Logger: quiet, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	for _, body := range []string{"one", "two", "three"} {
		sendOne(t, b, "q", body, 0)
	}
	dst := filepath.Join(t.TempDir(), "queues.db")
	var damaged string
	for _, suffix := range []string{"", ".wal", ".wal.1"} {
		data, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if path+suffix == b.log.f.Name() {
			damaged = dst + suffix
			data[logHeaderLen+2] ^= 0xff // inside the first record of the epoch
		}
		if err := os.WriteFile(dst+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	found, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	c, err := Open(dst, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatalf("open with a damaged log: %v", err)
	}
	defer c.Close()
	if !strings.Contains(logged.String(), "level=ERROR") || !strings.Contains(logged.String(), "not whole") || !strings.Contains(logged.String(), "path="+damaged) {
		t.Fatalf("log does not report the damage at ERROR naming %s:\n%s", damaged, logged.String())
	}
	copies, _ := filepath.Glob(damaged + ".damaged-*")
	if len(copies) != 1 {
		t.Fatalf("copies of the damaged log: %v, want one", copies)
	}
	if kept, _ := os.ReadFile(copies[0]); !bytes.Equal(kept, found) {
		t.Fatal("the copy differs from the log as found")
	}
}

// TestDamagedStoreFileIsRefused: a store file whose pages were changed,
// or that was cut short, is refused at Open with what to do, where bbolt
// panicked or the process died of SIGBUS.
func TestDamagedStoreFileIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(data []byte) []byte
	}{
		{"pages changed", func(data []byte) []byte {
			for page := 2; (page+1)*4096 <= len(data); page++ {
				copy(data[page*4096:], bytes.Repeat([]byte{0xa5}, 64))
			}
			return data
		}},
		{"cut short", func(data []byte) []byte { return data[:len(data)/2] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "queues.db")
			b, err := Open(path, Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			mustEnsure(t, b, queue.QueueSpec{Name: "q"})
			for i := range 300 {
				sendOne(t, b, "q", strings.Repeat("x", 1000)+fmt.Sprint(i), 0)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(data), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Open(path, Options{Logger: quiet})
			if err == nil {
				_ = c.Close()
				t.Fatalf("a store file with its %s opened", tc.name)
			}
			if !strings.Contains(err.Error(), "is damaged") {
				t.Fatalf("error %q, want one saying the store file is damaged", err)
			}
			t.Log(err)
		})
	}
}

// TestPageSize: a store this build creates has pageSize pages; a store
// created with other pages (as builds before it made them, the operating
// system's 4 KiB) keeps them, and sends, keys and receives work in both,
// across a reopen.
func TestPageSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		created int // page size of a store made before Open; 0: none
		want    int
	}{
		{"new store", 0, pageSize},
		{"store of 4 KiB pages", 4096, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "queues.db")
			if tt.created > 0 {
				db, err := bolt.Open(path, 0o600, &bolt.Options{PageSize: tt.created})
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 2 {
				b, err := Open(path, Options{Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				if got := b.db.Info().PageSize; got != tt.want {
					t.Errorf("round %d: page size %d, want %d", round, got, tt.want)
				}
				mustEnsure(t, b, queue.QueueSpec{Name: "q"})
				key := fmt.Sprint("k", round)
				sendKeyed(t, b, strings.Repeat("x", 20<<10), key, "job", time.Now().Add(time.Hour)) // a body over a page
				if got := lookup(t, b, key); got != "job" {
					t.Errorf("round %d: key %q holds %q, want job", round, key, got)
				}
				// The first round's message stays in flight (received, not
				// deleted): each round receives its own.
				if msgs := receive(t, b, "q", 10, time.Minute); len(msgs) != 1 || len(msgs[0].Body) != 20<<10 {
					t.Errorf("round %d: received %d messages, want its one", round, len(msgs))
				}
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
