package embeddedqueue

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

// storeWithOneJob makes a store at path holding one visible message in
// queue q, closed, with its meta bucket's format set to stamp (none: the
// meta bucket removed, as builds before format 1 left it).
func storeWithOneJob(t *testing.T, path, stamp string) {
	t.Helper()
	b, err := Open(path, Options{Logger: quiet})
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
		{stamp: upgradable, stampThen: format},
		{stamp: "3", refused: `store format "3", this build reads "2" (and upgrades "1"): a newer sluice wrote it`, stampThen: "3"},
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
