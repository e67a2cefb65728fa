package embeddedqueue

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

func sendKeyed(t *testing.T, b *Backend, body, key, value string, expires time.Time) {
	t.Helper()
	res, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{
		{ID: "0", Body: []byte(body), Key: &queue.StoredKey{Key: key, Value: value, Expires: expires}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
}

func lookup(t *testing.T, b *Backend, key string) string {
	t.Helper()
	k, err := b.LookupKey(t.Context(), &queue.LookupKeyParams{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if k == nil {
		return ""
	}
	return k.Value
}

// TestKeys stores keys with sends, in each durability mode, and checks
// that they are found, survive a reopen (and, in interval mode, a crash
// copy), expire, are swept, and can be stored again once expired.
func TestKeys(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			opts := m.opts
			if opts.SyncInterval > 0 {
				opts.SyncInterval = time.Hour // nothing committed: the log holds it all
			}
			clock := newFakeClock()
			path := filepath.Join(t.TempDir(), "queues.db")
			opts.Clock, opts.Logger, opts.SweepInterval = clock.Now, testLogger(t), -1
			b, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			mustEnsure(t, b, queue.QueueSpec{Name: "q"})
			window := 10 * time.Minute
			sendKeyed(t, b, "one", "tenant-a\x00order-1", "job-1", clock.Now().Add(window))
			sendKeyed(t, b, "two", "tenant-b\x00order-1", "job-2", clock.Now().Add(2*window))
			if got := lookup(t, b, "tenant-a\x00order-1"); got != "job-1" {
				t.Fatalf("lookup: %q, want job-1", got)
			}
			if got := lookup(t, b, "tenant-a\x00order-2"); got != "" {
				t.Fatalf("lookup of a key never stored: %q", got)
			}
			if opts.SyncInterval > 0 {
				if got := lookup(t, crashCopy(t, path, clock.Now), "tenant-b\x00order-1"); got != "job-2" {
					t.Fatalf("after a crash: %q, want job-2", got)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if b, err = Open(path, opts); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close() })
			if got := lookup(t, b, "tenant-a\x00order-1"); got != "job-1" {
				t.Fatalf("after reopen: %q, want job-1", got)
			}

			clock.Advance(window + time.Second)
			if got := lookup(t, b, "tenant-a\x00order-1"); got != "" {
				t.Fatalf("expired key found: %q", got)
			}
			sendKeyed(t, b, "three", "tenant-a\x00order-1", "job-3", clock.Now().Add(window))
			if _, err := b.Sweep(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := lookup(t, b, "tenant-a\x00order-1"); got != "job-3" {
				t.Fatalf("key stored again after it expired: %q, want job-3", got)
			}
			clock.Advance(2 * window)
			if _, err := b.Sweep(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if n := countKeys(t, path); n != 0 {
				t.Fatalf("%d key records left after every key expired and a sweep", n)
			}
		})
	}
}

// countKeys counts the records of both key buckets of a closed store.
func countKeys(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{keysBucket, keyExpiryBucket} {
			n += tx.Bucket(name).Stats().KeyN
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeysOfAnOlderBuild: records in the layout of builds before the
// in-memory index (the value in bucket keys, an empty value in
// keys-expiry) are found after Open and swept, and new keys are written
// to keys-expiry alone.
func TestKeysOfAnOlderBuild(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	path := filepath.Join(t.TempDir(), "queues.db")
	opts := Options{Clock: clock.Now, Logger: testLogger(t), SweepInterval: -1}
	b, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Write old-layout records: one live, one expired.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := []struct {
		key, value string
		expires    time.Time
	}{
		{"tenant-a\x00old-live", "job-old", clock.Now().Add(time.Minute)},
		{"tenant-a\x00old-expired", "job-gone", clock.Now().Add(-time.Minute)},
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, o := range old {
			exp := binary.BigEndian.AppendUint64(nil, uint64(o.expires.UnixNano()))
			if err := tx.Bucket(keysBucket).Put([]byte(o.key), append(slices.Clone(exp), o.value...)); err != nil {
				return err
			}
			if err := tx.Bucket(keyExpiryBucket).Put(expiryKey(exp, []byte(o.key)), []byte{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}

	if b, err = Open(path, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sendKeyed(t, b, "new", "tenant-a\x00new", "job-new", clock.Now().Add(time.Hour))
	for _, tt := range []struct{ key, want string }{
		{"tenant-a\x00old-live", "job-old"},
		{"tenant-a\x00old-expired", ""},
		{"tenant-a\x00new", "job-new"},
	} {
		if got := lookup(t, b, tt.key); got != tt.want {
			t.Errorf("lookup %q: %q, want %q", tt.key, got, tt.want)
		}
	}
	clock.Advance(2 * time.Minute)
	if _, err := b.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, b, "tenant-a\x00old-live"); got != "" {
		t.Errorf("old key after it expired: %q", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Left: the new key's one record in keys-expiry, nothing in keys.
	if n := countKeys(t, path); n != 1 {
		t.Fatalf("%d key records left, want the new key's one", n)
	}
}
