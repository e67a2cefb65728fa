package embeddedqueue

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

// TestSequenceSetOncePerGroup checks that the message bucket's sequence,
// which the writer sets once per group (setSequences), is the highest
// sequence number of a group of several sends in the store, committed
// (replay=false) or replayed from the group's redo log record, as Open
// does after a crash (replay=true).
func TestSequenceSetOncePerGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, replay := range []bool{false, true} {
		t.Run("replay="+strconv.FormatBool(replay), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "queues.db")
			b, err := Open(path, Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			mustEnsure(t, b, queue.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
			sends := make([]*queue.SendParams, 3)
			for i := range sends {
				sends[i] = &queue.SendParams{Queue: "q"}
				for j := range 10 {
					sends[i].Entries = append(sends[i].Entries, queue.SendEntry{ID: strconv.Itoa(j), Body: []byte("x")})
				}
			}
			if !replay {
				if _, errs := b.SendMany(ctx, sends); errors.Join(errs...) != nil {
					t.Fatal(errors.Join(errs...))
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = db.Close() }()
			if replay {
				// The group's record, made as the writer makes it in a
				// transaction that is then dropped, and replayed.
				w := &Backend{db: db, opts: Options{Logger: quiet}, queues: map[string]*memQueue{"q": newMemQueue(queue.QueueSpec{Name: "q"}, 1)}, keys: newKeyIndex()}
				tx, err := db.Begin(true)
				if err != nil {
					t.Fatal(err)
				}
				wt := &writeTx{tx: tx, now: time.Now().UnixNano()}
				for _, p := range sends {
					ps, err := w.prepareSend(p)
					if err == nil {
						sends := []*preparedSend{ps}
						_, err = w.applySends(wt, sends, keyRecords(sends))
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if err := wt.setSequences(); err != nil {
					t.Fatal(err)
				}
				if err := tx.Rollback(); err != nil {
					t.Fatal(err)
				}
				if err := db.Update(func(tx *bolt.Tx) error { return applyChanges(tx, wt.log) }); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.View(func(tx *bolt.Tx) error {
				if got := tx.Bucket(msgBucket("q")).Sequence(); got != 30 {
					t.Errorf("sequence %d, want 30", got)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
