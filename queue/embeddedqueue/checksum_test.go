package embeddedqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

// sealed is a checksummed record of id and body.
func sealed(id, body string) []byte {
	rec := append([]byte(id), body...)
	return appendChecksum(rec, rec)
}

// TestRecordBody: a checksummed record yields its body only when its
// checksum matches, whichever byte was damaged; a record from before the
// upgrade yields all after the ID; records too short are damaged.
func TestRecordBody(t *testing.T) {
	id := "0123456789abcdef"
	flip := func(rec []byte, i int) []byte {
		rec = slices.Clone(rec)
		rec[i] ^= 0x01
		return rec
	}
	good := sealed(id, "payload")
	tests := []struct {
		name        string
		rec         []byte
		checksummed bool
		body        string
		err         string // "" for none
	}{
		{"checksummed", good, true, "payload", ""},
		{"checksummed, empty body", sealed(id, ""), true, "", ""},
		{"byte of the body flipped", flip(good, idLen+3), true, "", "checksum mismatch"},
		{"byte of the ID flipped", flip(good, 2), true, "", "checksum mismatch"},
		{"byte of the checksum flipped", flip(good, len(good)-1), true, "", "checksum mismatch"},
		{"checksum cut off", good[:len(good)-crcLen], true, "", "checksum mismatch"},
		{"shorter than ID and checksum", good[:idLen+crcLen-1], true, "", "shorter than a message ID and checksum"},
		{"from before the upgrade", []byte(id + "payload"), false, "payload", ""},
		{"from before the upgrade, empty body", []byte(id), false, "", ""},
		{"from before the upgrade, short", []byte(id[:5]), false, "", "shorter than a message ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := recordBody(tt.rec, tt.checksummed)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("error %v, want body %q", err, tt.body)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("body %q, error %v, want an error saying %q", body, err, tt.err)
			case tt.err == "" && string(body) != tt.body:
				t.Fatalf("body %q, want %q", body, tt.body)
			}
		})
	}
}

// FuzzRecordBody: a record sealed by newRecords gives back its body, and
// any one flipped bit of it is caught (CRC-32C detects every error of up
// to three bits in records of this size).
func FuzzRecordBody(f *testing.F) {
	f.Add([]byte("body"), uint(0))
	f.Add([]byte{}, uint(130))
	f.Fuzz(func(t *testing.T, body []byte, bit uint) {
		recs := newRecords([]queue.SendEntry{{Body: body}}, make([]queue.SendResult, 1))
		got, err := recordBody(recs[0], true)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("recordBody = %q, %v; want %q", got, err, body)
		}
		rec := slices.Clone(recs[0])
		bit %= uint(len(rec) * 8)
		rec[bit/8] ^= 1 << (bit % 8)
		if _, err := recordBody(rec, true); !errors.Is(err, errChecksum) {
			t.Fatalf("bit %d flipped: error %v, want a checksum mismatch", bit, err)
		}
	})
}

// flipInFile flips one byte of the only copy of marker in the file at
// path, in the middle of it.
func flipInFile(t *testing.T, path, marker string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte(marker))
	if i < 0 || bytes.Count(data, []byte(marker)) != 1 {
		t.Fatalf("%s holds %q %d times, want once", path, marker, bytes.Count(data, []byte(marker)))
	}
	data[i+len(marker)/2] ^= 0x20
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// corruptRecords reads the corrupt bucket of the closed store at path.
func corruptRecords(t *testing.T, path string) map[string][]byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string][]byte{}
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(corruptBucket).ForEach(func(k, v []byte) error {
			out[string(k)] = slices.Clone(v)
			return nil
		})
	})
	return out
}

// TestDamagedBodyIsKeptAside: a byte of a stored body flipped on disk
// (the store closed, the file changed, the store opened again) is caught
// by the record's checksum. The damaged job is neither delivered nor
// redriven to the dead-letter queue: it goes to the corrupt bucket as
// read, with an ERROR naming its queue, sequence number and message ID,
// and is counted, across a reopen too. The jobs around it are delivered
// (or redriven) intact, in order.
func TestDamagedBodyIsKeptAside(t *testing.T) {
	t.Parallel()
	bodies := []string{"first job, intact", "second job, to be damaged on disk", "third job, intact"}
	for _, tc := range []struct {
		name    string
		redrive bool // the jobs are past their max receive count when the damage is found
	}{
		{name: "receive"},
		{name: "redrive", redrive: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "queues.db")
			clock := newFakeClock()
			b, err := Open(path, Options{Logger: quiet, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			mustEnsure(t, b, queue.QueueSpec{Name: "dlq"}, queue.QueueSpec{Name: "q", DeadLetterQueue: "dlq", MaxReceiveCount: 1})
			ids := make([]string, len(bodies))
			for i, body := range bodies {
				ids[i] = sendOne(t, b, "q", body, 0)
			}
			if tc.redrive {
				if got := receive(t, b, "q", 10, time.Second); len(got) != 3 {
					t.Fatalf("first receive: %d messages, want 3", len(got))
				}
				clock.Advance(2 * time.Second)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			flipInFile(t, path, bodies[1])

			var logged bytes.Buffer
			b, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)), Clock: clock.Now})
			if err != nil {
				t.Fatalf("open with a damaged body: %v", err)
			}
			var observed atomic.Int64
			b.ObserveCorruptMessages(func() { observed.Add(1) })
			msgs := receive(t, b, "q", 10, time.Minute)
			if tc.redrive {
				if len(msgs) != 0 {
					t.Fatalf("received %d messages past their max receive count, want them redriven", len(msgs))
				}
				msgs = receive(t, b, "dlq", 10, time.Minute)
			}
			var got []string
			for _, m := range msgs {
				got = append(got, string(m.Body))
			}
			if want := []string{bodies[0], bodies[2]}; !slices.Equal(got, want) {
				t.Fatalf("delivered %q, want the two intact jobs %q", got, want)
			}
			inFlight := int64(2) // the intact jobs just received
			if tc.redrive {
				inFlight = 0
			}
			if s := stats(t, b, "q"); s.Visible != 0 || s.InFlight != inFlight || s.Delayed != 0 {
				t.Fatalf("queue after the receive: %+v, want the damaged job gone from it", s)
			}
			if n, o := b.CorruptMessages(), observed.Load(); n != 1 || o != 1 {
				t.Fatalf("CorruptMessages = %d, observed %d; want 1", n, o)
			}
			for _, want := range []string{"level=ERROR", "queue=q", "seq=2", "message_id=" + ids[1], "checksum mismatch", "corrupt bucket"} {
				if !strings.Contains(logged.String(), want) {
					t.Fatalf("log does not say %q:\n%s", want, logged.String())
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}

			kept := corruptRecords(t, path)
			key := "q\x00" + string(seqKey(2))
			if len(kept) != 1 || kept[key] == nil {
				t.Fatalf("corrupt bucket holds %d records, want message 2 of q", len(kept))
			}
			if rec := kept[key]; messageID(rec) != ids[1] || strings.Contains(string(rec), bodies[1]) {
				t.Fatalf("kept record %q, want message %s as damaged", rec, ids[1])
			}
			logged.Reset()
			b, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)), Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if n := b.CorruptMessages(); n != 1 {
				t.Fatalf("CorruptMessages after a reopen = %d, want 1", n)
			}
			if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "messages=1") {
				t.Fatalf("reopen does not warn of the message kept aside:\n%s", logged.String())
			}
			clock.Advance(2 * time.Minute)
			if msgs := receive(t, b, "q", 10, time.Minute); len(msgs) != 0 {
				t.Fatalf("after a reopen q delivered %d messages, want none", len(msgs))
			}
		})
	}
}

// rawRecords reads the message records of queue q in the closed store at
// path, by sequence number, and its meta bucket's crc-from for q (0 if
// none).
func rawRecords(t *testing.T, path, q string) (map[uint64][]byte, uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	recs := map[uint64][]byte{}
	var from uint64
	_ = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(crcFromKey(q)); len(v) == 8 {
			from = binary.BigEndian.Uint64(v)
		}
		return tx.Bucket(msgBucket(q)).ForEach(func(k, v []byte) error {
			recs[binary.BigEndian.Uint64(k)] = slices.Clone(v)
			return nil
		})
	})
	return recs, from
}

// TestUpgradeKeepsRecords: a format 2 store, with jobs in its file and
// more in its redo log (a copy taken while its process ran, as after a
// crash), opens and is upgraded without its records being rewritten:
// they stay as they were, without a checksum, and are delivered intact,
// and redriven with one. Jobs sent after the upgrade are checksummed, as
// are the records of a queue made after it.
func TestUpgradeKeepsRecords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := filepath.Join(dir, "old", "queues.db")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	specs := []queue.QueueSpec{{Name: "dlq"}, {Name: "q", DeadLetterQueue: "dlq", MaxReceiveCount: 1}}
	b, err := open(old, Options{Logger: quiet}, knobs{legacyRecords: true})
	if err != nil {
		t.Fatal(err)
	}
	mustEnsure(t, b, specs...)
	sendOne(t, b, "q", "in the file 1", 0)
	sendOne(t, b, "q", "in the file 2", 0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// An interval this long leaves the next sends in the redo log alone:
	// no checkpoint.
	b, err = open(old, Options{Logger: quiet, SyncInterval: time.Hour}, knobs{legacyRecords: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sendOne(t, b, "q", "in the log 3", 0)
	sendOne(t, b, "q", "in the log 4", 0)
	path := filepath.Join(dir, "queues.db")
	for _, suffix := range []string{"", ".wal", ".wal.1"} {
		data, err := os.ReadFile(old + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+suffix, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error { // as a format 2 build left it
		if err := tx.DeleteBucket(corruptBucket); err != nil {
			return err
		}
		return tx.Bucket(metaBucket).Put(formatKey, []byte("2"))
	})
	if err = errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	before, _ := rawRecords(t, path, "q")
	if len(before) != 2 {
		t.Fatalf("format 2 store file holds %d records, want 2 (and 2 in its log)", len(before))
	}

	var logged bytes.Buffer
	clock := newFakeClock()
	clock.ns.Store(time.Now().UnixNano())
	b, err = Open(path, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)), Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "store format upgraded") {
		t.Fatalf("no upgrade logged:\n%s", logged.String())
	}
	mustEnsure(t, b, append(specs, queue.QueueSpec{Name: "new"})...)
	sendOne(t, b, "q", "after the upgrade 5", 0)
	sendOne(t, b, "new", "in a new queue", 0)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if s := stampOf(t, path); s != format {
		t.Fatalf("stamp %q after the upgrade, want %q", s, format)
	}
	want := []string{"in the file 1", "in the file 2", "in the log 3", "in the log 4", "after the upgrade 5"}
	after, from := rawRecords(t, path, "q")
	if from != 5 {
		t.Fatalf("q checksummed from %d, want 5: after the 2 records of the file and the 2 of the log", from)
	}
	for seq, rec := range before {
		if !bytes.Equal(after[seq], rec) {
			t.Fatalf("record %d rewritten by the upgrade: %q, was %q", seq, after[seq], rec)
		}
	}
	for seq := uint64(3); seq <= 4; seq++ {
		if body := after[seq][idLen:]; string(body) != want[seq-1] {
			t.Fatalf("record %d replayed from the log holds %q, want %q with no checksum", seq, body, want[seq-1])
		}
	}
	if body, err := recordBody(after[5], true); err != nil || string(body) != want[4] {
		t.Fatalf("record sent after the upgrade: %q, %v; want %q checksummed", body, err, want[4])
	}

	b, err = Open(path, Options{Logger: quiet, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var got []string
	for _, m := range receive(t, b, "q", 10, time.Second) {
		got = append(got, string(m.Body))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("received %q, want %q", got, want)
	}
	clock.Advance(2 * time.Second) // past the max receive count: redriven
	if msgs := receive(t, b, "q", 10, time.Second); len(msgs) != 0 {
		t.Fatalf("received %d messages again, want them redriven", len(msgs))
	}
	got = got[:0]
	for _, m := range receive(t, b, "dlq", 10, time.Second) {
		got = append(got, string(m.Body))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("dead-letter queue delivered %q, want %q", got, want)
	}
	if msgs := receive(t, b, "new", 10, time.Second); len(msgs) != 1 || string(msgs[0].Body) != "in a new queue" {
		t.Fatalf("queue made after the upgrade delivered %d messages, want its one intact", len(msgs))
	}
	if n := b.CorruptMessages(); n != 0 {
		t.Fatalf("CorruptMessages = %d, want 0", n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for name, n := range map[string]int{"dlq": 5, "new": 1} {
		recs, from := rawRecords(t, path, name)
		if len(recs) != n || from != 0 && name == "new" {
			t.Fatalf("queue %s: %d records, checksummed from %d; want %d", name, len(recs), from, n)
		}
		for seq, rec := range recs {
			if seq >= from {
				if _, err := recordBody(rec, true); err != nil {
					t.Fatalf("queue %s record %d: %v, want it checksummed", name, seq, err)
				}
			}
		}
	}
}

// BenchmarkRecordBody is the check every receive adds, on a 1 KiB body.
func BenchmarkRecordBody(b *testing.B) {
	rec := newRecords([]queue.SendEntry{{Body: make([]byte, 1024)}}, make([]queue.SendResult, 1))[0]
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if _, err := recordBody(rec, true); err != nil {
			b.Fatal(err)
		}
	}
}
