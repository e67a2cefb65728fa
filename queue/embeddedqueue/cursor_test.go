package embeddedqueue

import (
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestDeletesThroughKeptCursors checks that deleting through one cursor
// kept for many changes (writeTx.delAt, and applyChanges replaying the
// log it writes) leaves a bucket as bbolt's Bucket.Delete does: keys
// present, absent, between, past the last, deleted twice, and put again
// between deletes, over a bucket of several pages.
func TestDeletesThroughKeptCursors(t *testing.T) {
	t.Parallel()
	const n = 3000 // several leaf pages of 8-byte keys and 24-byte values
	name := []byte("s/q")
	type change struct {
		del bool
		seq uint64
	}
	var ops []change
	for seq := uint64(0); seq < n+10; seq += 3 { // present, between keys, and past the last
		ops = append(ops, change{true, seq})
	}
	ops = append(ops,
		change{true, 0}, change{true, 3}, change{true, n + 100}, // deleted twice, never there
		change{false, 6}, change{true, 7}, change{false, 1_000_000}, // a put back, and at the end: the tree moves under the cursor
		change{true, 6}, change{false, 6}, change{true, 1_000_000})
	want := map[uint64]bool{}
	for seq := range uint64(n) {
		if seq%2 == 0 { // the even keys: some deletes fall between keys
			want[seq] = true
		}
	}
	for _, o := range ops {
		if o.del {
			delete(want, o.seq)
		} else {
			want[o.seq] = true
		}
	}

	// fill makes the bucket with the even keys below n.
	fill := func(t *testing.T) *bolt.DB {
		db, err := bolt.Open(filepath.Join(t.TempDir(), "db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket(name)
			if err != nil {
				return err
			}
			for seq := uint64(0); seq < n; seq += 2 {
				if err := b.Put(seqKey(seq), make([]byte, stateLen)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	check := func(t *testing.T, db *bolt.DB) {
		t.Helper()
		var got, wantKeys []uint64
		for seq := range want {
			wantKeys = append(wantKeys, seq)
		}
		slices.Sort(wantKeys)
		_ = db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(name).ForEach(func(k, _ []byte) error {
				got = append(got, seqFromKey(k))
				return nil
			})
		})
		if !slices.Equal(got, wantKeys) {
			t.Fatalf("bucket holds %d keys, want %d", len(got), len(wantKeys))
		}
	}

	var log []byte
	t.Run("writer", func(t *testing.T) {
		db := fill(t)
		err := db.Update(func(tx *bolt.Tx) error {
			w := &writeTx{tx: tx}
			b := tx.Bucket(name)
			c := b.Cursor()
			for _, o := range ops {
				var err error
				if o.del {
					err = w.delAt(c, name, seqKey(o.seq))
				} else {
					err = w.put(b, name, seqKey(o.seq), make([]byte, stateLen))
				}
				if err != nil {
					return err
				}
			}
			log = w.log
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		check(t, db)
	})
	t.Run("replay", func(t *testing.T) {
		db := fill(t)
		if err := db.Update(func(tx *bolt.Tx) error { return applyChanges(tx, log) }); err != nil {
			t.Fatal(err)
		}
		check(t, db)
	})
}

func seqFromKey(k []byte) uint64 {
	var seq uint64
	for _, b := range k {
		seq = seq<<8 | uint64(b)
	}
	return seq
}
