package embeddedqueue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
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

// reopenWithKeys closes b, checks that its store at path holds records
// key records (how says which), reopens it with opts and checks that
// every key in want still finds its value; it returns the reopened
// backend, closed when the test ends.
func reopenWithKeys(t *testing.T, b *Backend, path string, opts Options, records int, how string, want map[string]string) *Backend {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, path); n != records {
		t.Fatalf("%d key records, want %d (%s)", n, records, how)
	}
	b, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	for key, value := range want {
		if got := lookup(t, b, key); got != value {
			t.Errorf("after reopen, lookup %q: %q, want %q", key, got, value)
		}
	}
	return b
}

// openKeyTest opens a store on a fake clock, with no background sweep
// and queue "q", and closes it at the end of t.
func openKeyTest(t *testing.T) (*Backend, string, *fakeClock, Options) {
	t.Helper()
	clock := newFakeClock()
	path := filepath.Join(t.TempDir(), "queues.db")
	opts := Options{Clock: clock.Now, Logger: testLogger(t), SweepInterval: -1}
	b, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	return b, path, clock, opts
}

// reopenKeyTest closes b and opens its store again, closed at the end of
// t: a restart.
func reopenKeyTest(t *testing.T, b *Backend, path string, opts Options) *Backend {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestKeysOfAnOlderBuild: records in the layouts of older builds (the
// value in bucket keys and an empty value in keys-expiry; one record per
// key with its value) are found after Open and swept, and new keys are
// written to keys-expiry alone.
func TestKeysOfAnOlderBuild(t *testing.T) {
	t.Parallel()
	b, path, clock, opts := openKeyTest(t)
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
		perKey     bool // the layout with one record per key, its value in it
	}{
		{"tenant-a\x00old-live", "job-old", clock.Now().Add(time.Minute), false},
		{"tenant-a\x00old-expired", "job-gone", clock.Now().Add(-time.Minute), false},
		{"tenant-a\x00per-key-live", "job-per-key", clock.Now().Add(time.Minute), true},
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, o := range old {
			exp := binary.BigEndian.AppendUint64(nil, uint64(o.expires.UnixNano()))
			if o.perKey {
				if err := tx.Bucket(keyExpiryBucket).Put(expiryKey(exp, []byte(o.key)), append([]byte{keyValueMark}, o.value...)); err != nil {
					return err
				}
				continue
			}
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
		{"tenant-a\x00per-key-live", "job-per-key"},
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
	for _, key := range []string{"tenant-a\x00old-live", "tenant-a\x00per-key-live"} {
		if got := lookup(t, b, key); got != "" {
			t.Errorf("old key %q after it expired: %q", key, got)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Left: the new key's one record in keys-expiry, nothing in keys.
	if n := countKeys(t, path); n != 1 {
		t.Fatalf("%d key records left, want the new key's one", n)
	}
}

// TestKeysOfABatch: the keys of one send that expire together share a
// record; keys with another expiry get their own. Each is found after a
// reopen, and a sweep forgets exactly the expired ones, except a key
// stored again since with a later expiry.
func TestKeysOfABatch(t *testing.T) {
	t.Parallel()
	b, path, clock, opts := openKeyTest(t)
	soon, later := clock.Now().Add(time.Minute), clock.Now().Add(time.Hour)
	var entries []queue.SendEntry
	want := map[string]string{}
	for i, exp := range []time.Time{soon, soon, soon, later, later, soon} {
		key, value := fmt.Sprintf("tenant-a\x00k%d", i), fmt.Sprintf("job-%d", i)
		want[key] = value
		entries = append(entries, queue.SendEntry{ID: fmt.Sprint(i), Body: []byte("b"), Key: &queue.StoredKey{Key: key, Value: value, Expires: exp}})
	}
	entries = append(entries, queue.SendEntry{ID: "unkeyed", Body: []byte("b")})
	if _, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: entries}); err != nil {
		t.Fatal(err)
	}
	b = reopenWithKeys(t, b, path, opts, 3, "soon ×3, later ×2, soon ×1", want)

	clock.Advance(2 * time.Minute)
	sendKeyed(t, b, "again", "tenant-a\x00k0", "job-again", clock.Now().Add(time.Hour))
	if _, err := b.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	want["tenant-a\x00k0"] = "job-again"
	for _, k := range []string{"k1", "k2", "k5"} {
		want["tenant-a\x00"+k] = ""
	}
	for key, value := range want {
		if got := lookup(t, b, key); got != value {
			t.Errorf("after the sweep, lookup %q: %q, want %q", key, got, value)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, path); n != 2 {
		t.Fatalf("%d key records after the sweep, want 2 (later ×2, k0 again)", n)
	}
}

// FuzzKeyList: a list of keys decodes to what was encoded, and any other
// value either decodes or fails, without a panic.
func FuzzKeyList(f *testing.F) {
	f.Add([]byte("a\x00b"), []byte("job-1"), []byte{keyListMark, 1, 'k', 1, 'v'})
	f.Add([]byte{}, []byte{}, []byte{keyListMark, 200})
	f.Fuzz(func(t *testing.T, key, value, raw []byte) {
		keys := []*queue.StoredKey{{Key: string(key), Value: string(value)}, {Key: string(value), Value: string(key)}}
		var got []*queue.StoredKey
		if err := keyList(encodeKeyList(keys), func(k, v []byte) {
			got = append(got, &queue.StoredKey{Key: string(k), Value: string(v)})
		}); err != nil {
			t.Fatalf("decoding an encoded list: %v", err)
		}
		if len(got) != 2 || *got[0] != *keys[0] || *got[1] != *keys[1] {
			t.Fatalf("round trip: got %v, want %v", got, keys)
		}
		if len(raw) > 0 {
			_ = keyList(raw, func(k, v []byte) {})
		}
	})
}

// TestKeyRecordsOfTwoSendsStayApart: two sends whose keys expire at the
// same instant and begin with the same key keep a record each. Named by
// their first key, the second replaced the first, and the first send's
// other keys were gone after a reopen although LookupKey found them
// before (found in review).
func TestKeyRecordsOfTwoSendsStayApart(t *testing.T) {
	t.Parallel()
	b, path, clock, opts := openKeyTest(t)
	exp := clock.Now().Add(time.Hour)
	send := func(keys ...string) {
		t.Helper()
		var entries []queue.SendEntry
		for _, k := range keys {
			entries = append(entries, queue.SendEntry{ID: k, Body: []byte(k), Key: &queue.StoredKey{Key: k, Value: "v" + k, Expires: exp}})
		}
		if _, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
	send("a", "b")
	send("a", "c")
	b = reopenKeyTest(t, b, path, opts)
	for _, k := range []string{"a", "b", "c"} {
		if got := lookup(t, b, k); got != "v"+k {
			t.Errorf("key %s after a reopen: %q, want %q", k, got, "v"+k)
		}
	}
}

// TestKeyStoredAgainWithAnEarlierExpiry: the index keeps the later expiry
// of a key stored twice, as Open does (it reads the records in expiry
// order), so a sweep and a reopen agree on what the key holds.
func TestKeyStoredAgainWithAnEarlierExpiry(t *testing.T) {
	t.Parallel()
	b, path, clock, opts := openKeyTest(t)
	now := clock.Now()
	sendKeyed(t, b, "a", "k", "first", now.Add(2*time.Hour))
	sendKeyed(t, b, "b", "k", "second", now.Add(time.Hour))
	if got := lookup(t, b, "k"); got != "first" {
		t.Errorf("key stored again with an earlier expiry holds %q, want the later expiry's %q", got, "first")
	}
	clock.Advance(90 * time.Minute)
	if _, err := b.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	afterSweep := lookup(t, b, "k")
	b = reopenKeyTest(t, b, path, opts)
	if afterReopen := lookup(t, b, "k"); afterSweep != "first" || afterReopen != "first" {
		t.Errorf("key after the earlier expiry's sweep %q, after a reopen %q; want %q both", afterSweep, afterReopen, "first")
	}
}

// TestBrokenStoreAnswersNoIndex: a send is refused when its record
// cannot be written, and if the transaction then cannot be rebuilt from
// the log either (here both fail on a log file closed underneath), the
// backend is unusable until reopened. Its index still held the refused
// send: LookupKey answered its key, so a retry of the submit was told
// its job was stored, and Stats counted the message. Both must refuse.
func TestBrokenStoreAnswersNoIndex(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	var b *Backend
	b, _ = setupWith(t, Options{}, knobs{beforeGroup: func() {
		if armed.CompareAndSwap(true, false) {
			_ = b.log.f.Close() // the writer's: the hook runs on it
		}
	}})
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	armed.Store(true)
	_, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{
		{ID: "0", Body: []byte("refused"), Key: &queue.StoredKey{Key: "k", Value: "job-1", Expires: time.Now().Add(time.Hour)}},
	}})
	if !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("send with the log closed: %v, want ErrUnavailable", err)
	}
	if k, err := b.LookupKey(t.Context(), &queue.LookupKeyParams{Key: "k"}); k != nil || !errors.Is(err, queue.ErrUnavailable) {
		t.Errorf("lookup of the refused send's key: %+v, %v; want nothing and ErrUnavailable", k, err)
	}
	if s, err := b.Stats(t.Context(), &queue.StatsParams{Queues: []string{"q"}}); !errors.Is(err, queue.ErrUnavailable) {
		t.Errorf("stats: %+v, %v; want ErrUnavailable", s, err)
	}
}

// TestKeysOfSendManyShareARecord checks that the keys of the sends of one
// SendMany that expire together are stored as one record, and are all
// found after a restart.
func TestKeysOfSendManyShareARecord(t *testing.T) {
	t.Parallel()
	b, path, clock, opts := openKeyTest(t)
	soon, later := clock.Now().Add(time.Minute), clock.Now().Add(time.Hour)
	want := map[string]string{}
	var sends []*queue.SendParams
	for s, exp := range []time.Time{soon, soon, soon, later} {
		p := &queue.SendParams{Queue: "q"}
		for i := range 3 {
			key, value := fmt.Sprintf("tenant-a\x00s%dk%d", s, i), fmt.Sprintf("job-%d-%d", s, i)
			want[key] = value
			p.Entries = append(p.Entries, queue.SendEntry{ID: fmt.Sprint(i), Body: []byte("b"), Key: &queue.StoredKey{Key: key, Value: value, Expires: exp}})
		}
		p.Entries = append(p.Entries, queue.SendEntry{ID: "unkeyed", Body: []byte("b")})
		sends = append(sends, p)
	}
	if _, errs := b.SendMany(t.Context(), sends); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	for key, value := range want {
		if got := lookup(t, b, key); got != value {
			t.Errorf("lookup %q: %q, want %q", key, got, value)
		}
	}
	reopenWithKeys(t, b, path, opts, 2, "soon ×9, later ×3", want)
}

// TestKeyIsHiddenUntilItsSendIsSynced looks a key up while the log sync of
// the send that stores it runs, and fails that sync: queue.KeyStore
// promises only keys stored by a send that was answered, so the lookup
// must not see it, before or after the failure.
func TestKeyIsHiddenUntilItsSendIsSynced(t *testing.T) {
	t.Parallel()
	var (
		armed  atomic.Bool
		b      *Backend
		during atomic.Pointer[queue.StoredKey]
	)
	b, _ = setupWith(t, Options{}, knobs{
		checkpointEvery: time.Hour,
		failLogSync: func() error {
			if !armed.CompareAndSwap(true, false) {
				return nil
			}
			if k, err := b.LookupKey(t.Context(), &queue.LookupKeyParams{Key: "k"}); err == nil && k != nil {
				during.Store(k)
			}
			return errors.New("EIO")
		},
	})
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	armed.Store(true)
	_, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{
		ID: "0", Body: []byte("x"),
		Key: &queue.StoredKey{Key: "k", Value: "job-1", Expires: b.opts.Clock().Add(time.Hour)},
	}}})
	if err == nil {
		t.Fatal("the send whose log sync failed was answered OK")
	}
	if k := during.Load(); k != nil {
		t.Errorf("while its send was syncing, LookupKey answered %q -> %q", k.Key, k.Value)
	}
	if k, err := b.LookupKey(t.Context(), &queue.LookupKeyParams{Key: "k"}); err != nil || k != nil {
		t.Errorf("after the failed send, LookupKey answered %v, %v; want nothing", k, err)
	}
	// A send that succeeds is visible once answered.
	if _, err := b.Send(t.Context(), &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{
		ID: "0", Body: []byte("x"),
		Key: &queue.StoredKey{Key: "k", Value: "job-2", Expires: b.opts.Clock().Add(time.Hour)},
	}}}); err != nil {
		t.Fatal(err)
	}
	if k, err := b.LookupKey(t.Context(), &queue.LookupKeyParams{Key: "k"}); err != nil || k == nil || k.Value != "job-2" {
		t.Errorf("after an answered send, LookupKey answered %v, %v; want job-2", k, err)
	}
}

// TestLookupKeys: LookupKeys answers for each key what LookupKey does, in
// order, repeats included, and fails as a whole when the backend is
// closed or the context has ended.
func TestLookupKeys(t *testing.T) {
	t.Parallel()
	b, _, clock, _ := openKeyTest(t)
	now := clock.Now()
	sendKeyed(t, b, "a", "a", "job-a", now.Add(time.Hour))
	sendKeyed(t, b, "b", "b", "job-b", now.Add(time.Minute))
	clock.Advance(2 * time.Minute) // b has expired
	tests := []struct {
		name string
		keys []string
	}{
		{"none", nil},
		{"stored", []string{"a"}},
		{"missing", []string{"x"}},
		{"expired", []string{"b"}},
		{"mixed, repeated", []string{"x", "a", "b", "a", "y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.LookupKeys(t.Context(), &queue.LookupKeysParams{Keys: tt.keys})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.keys) {
				t.Fatalf("%d answers for %d keys", len(got), len(tt.keys))
			}
			for i, key := range tt.keys {
				one, err := b.LookupKey(t.Context(), &queue.LookupKeyParams{Key: key})
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case (got[i] == nil) != (one == nil):
					t.Errorf("key %q: LookupKeys %+v, LookupKey %+v", key, got[i], one)
				case got[i] != nil && *got[i] != *one:
					t.Errorf("key %q: LookupKeys %+v, LookupKey %+v", key, *got[i], *one)
				}
			}
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.LookupKeys(ctx, &queue.LookupKeysParams{Keys: []string{"a"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("with an ended context: %v, want context.Canceled", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LookupKeys(t.Context(), &queue.LookupKeysParams{Keys: []string{"a"}}); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("after Close: %v, want queue.ErrClosed", err)
	}
}
