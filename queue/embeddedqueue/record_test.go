package embeddedqueue

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// TestNewRecords: each stored body gets its own record, a random ID
// followed by the body and their checksum, cut from one array so that none can grow into
// the next; entries that failed already get none.
func TestNewRecords(t *testing.T) {
	failed := queue.SendResult{Err: errors.New("too large")}
	tests := []struct {
		name    string
		bodies  []string
		results []queue.SendResult
	}{
		{name: "one", bodies: []string{"a"}, results: make([]queue.SendResult, 1)},
		{name: "several", bodies: []string{"a", "bb", "", "dddd"}, results: make([]queue.SendResult, 4)},
		{name: "failed entries", bodies: []string{"a", "big", "c"}, results: []queue.SendResult{{}, failed, {}}},
		{name: "all failed", bodies: []string{"x", "y"}, results: []queue.SendResult{failed, failed}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries := make([]queue.SendEntry, len(tt.bodies))
			for i, b := range tt.bodies {
				entries[i].Body = []byte(b)
			}
			recs := newRecords(entries, tt.results)
			if len(recs) != len(entries) {
				t.Fatalf("%d records for %d entries", len(recs), len(entries))
			}
			ids := map[string]bool{}
			for i, rec := range recs {
				if tt.results[i].Err != nil {
					if rec != nil {
						t.Errorf("record %d made for a failed entry", i)
					}
					continue
				}
				body, err := recordBody(rec, true)
				if err != nil || string(body) != tt.bodies[i] || cap(rec) != len(rec) {
					t.Errorf("record %d = %q (cap %d, %v), want an ID, %q and their checksum, capped", i, rec, cap(rec), err, tt.bodies[i])
				}
				id := string(rec[:idLen])
				if ids[id] {
					t.Errorf("record %d repeats an ID", i)
				}
				ids[id] = true
			}
		})
	}
}

// TestSendMessageIDs: the IDs a send answers are UUIDs (version 4
// layout), distinct, and those its messages are received with.
func TestSendMessageIDs(t *testing.T) {
	b, _ := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q"})
	const n = queue.MaxBatch
	p := &queue.SendParams{Queue: "q", Entries: make([]queue.SendEntry, n)}
	for i := range p.Entries {
		p.Entries[i] = queue.SendEntry{ID: string(rune('a' + i)), Body: []byte{byte(i)}}
	}
	p.Entries[3].Body = make([]byte, queue.MaxBodyBytes+1) // fails alone, with no ID
	res, err := b.Send(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	byID := map[string]byte{}
	for i, r := range res {
		if i == 3 {
			if r.Err == nil || r.MessageID != "" {
				t.Errorf("entry 3: %+v, want a failure with no message ID", r)
			}
			continue
		}
		if r.Err != nil || !uuid.MatchString(r.MessageID) {
			t.Errorf("entry %d: %+v, want a UUID", i, r)
		}
		if _, dup := byID[r.MessageID]; dup {
			t.Errorf("entry %d repeats message ID %s", i, r.MessageID)
		}
		byID[r.MessageID] = byte(i)
	}
	msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: "q", Max: n})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n-1 {
		t.Fatalf("received %d messages, want %d", len(msgs), n-1)
	}
	for _, m := range msgs {
		if i, ok := byID[m.MessageID]; !ok || len(m.Body) != 1 || m.Body[0] != i {
			t.Errorf("received %s with body %v: not the message sent with that ID", m.MessageID, m.Body)
		}
		if strings.ToLower(m.MessageID) != m.MessageID {
			t.Errorf("message ID %s is not lower case", m.MessageID)
		}
	}
}

// TestKeyRecords: the stored keys of a SendMany's sends get one record
// per run that expires together, across sends, named by the message id
// of the run's first; entries that failed or carry no key are left out.
func TestKeyRecords(t *testing.T) {
	soon, later := time.Unix(100, 0), time.Unix(200, 0)
	type entry struct {
		key    string // "" for none
		exp    time.Time
		failed bool
	}
	tests := []struct {
		name  string
		sends [][]entry
		want  []string // per record: its first message's entry ("s.i") and its keys
	}{
		{name: "no keys", sends: [][]entry{{{}, {}}}, want: nil},
		{name: "one send", sends: [][]entry{{{key: "a", exp: soon}, {key: "b", exp: soon}}}, want: []string{"0.0:a,b"}},
		{name: "sends share a record", sends: [][]entry{{{key: "a", exp: soon}}, {{}, {key: "b", exp: soon}}}, want: []string{"0.0:a,b"}},
		{name: "expiry changes", sends: [][]entry{{{key: "a", exp: soon}, {key: "b", exp: later}}, {{key: "c", exp: later}, {key: "d", exp: soon}}}, want: []string{"0.0:a", "0.1:b,c", "1.1:d"}},
		{name: "failed entries", sends: [][]entry{{{key: "a", exp: soon, failed: true}, {key: "b", exp: soon}}}, want: []string{"0.1:b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sends []*preparedSend
			firstOf := map[string]string{} // message id → "s.i"
			for s, es := range tt.sends {
				ps := &preparedSend{p: &queue.SendParams{}, results: make([]queue.SendResult, len(es)), recs: make([][]byte, len(es))}
				for i, e := range es {
					entry := queue.SendEntry{ID: fmt.Sprint(i)}
					if e.key != "" {
						entry.Key = &queue.StoredKey{Key: e.key, Value: "v", Expires: e.exp}
					}
					ps.p.Entries = append(ps.p.Entries, entry)
					if !e.failed {
						ps.recs[i] = []byte("record")
						ps.results[i].MessageID = fmt.Sprintf("msg-%d-%d", s, i)
						firstOf[ps.results[i].MessageID] = fmt.Sprintf("%d.%d", s, i)
					}
				}
				sends = append(sends, ps)
			}
			var got []string
			for _, r := range keyRecords(sends) {
				var keys []string
				if err := keyList(r.value, func(k, _ []byte) { keys = append(keys, string(k)) }); err != nil {
					t.Fatal(err)
				}
				if len(r.keys) != len(keys) {
					t.Errorf("record %x: %d index entries for %d keys", r.name, len(r.keys), len(keys))
				}
				got = append(got, firstOf[string(r.name[8:])]+":"+strings.Join(keys, ","))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("records %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKeysOfASendToAQueueGone: when a queue of a SendMany is gone by the
// time the writer applies it (with a failed commit's EnsureQueues), the
// keys of the sends stored are stored, and those of the send refused are
// not.
func TestKeysOfASendToAQueueGone(t *testing.T) {
	b, _ := setup(t)
	mustEnsure(t, b, queue.QueueSpec{Name: "q"}, queue.QueueSpec{Name: "gone"})
	exp := time.Now().Add(time.Hour)
	keyed := func(q, key string) *queue.SendParams {
		return &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "0", Body: []byte(key), Key: &queue.StoredKey{Key: key, Value: "v" + key, Expires: exp}}}}
	}
	var todo []*preparedSend
	for _, p := range []*queue.SendParams{keyed("q", "a"), keyed("gone", "b"), keyed("q", "c")} {
		ps, err := b.prepareSend(p)
		if err != nil {
			t.Fatal(err)
		}
		todo = append(todo, ps)
	}
	keys := keyRecords(todo)
	var stored []keyRecord
	err := b.doBlind(t.Context(), 0, func(w *writeTx) error {
		delete(b.queues, "gone")
		var err error
		stored, err = b.applySends(w, todo, keys)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b.publishKeys(stored)
	if !todo[1].missing || todo[0].missing || todo[2].missing {
		t.Fatalf("missing: %v %v %v, want only the second send's queue", todo[0].missing, todo[1].missing, todo[2].missing)
	}
	for key, want := range map[string]string{"a": "va", "b": "", "c": "vc"} {
		if got := lookup(t, b, key); got != want {
			t.Errorf("lookup %q: %q, want %q", key, got, want)
		}
	}
}

// TestPublishKeys: a send's caller indexes the keys of the records it
// stored, but for those already expired, which a sweep may have deleted.
func TestPublishKeys(t *testing.T) {
	b, bun := setup(t)
	now := bun.clock.Now()
	tests := []struct {
		key     string
		expires time.Time
		want    string
	}{
		{"later", now.Add(time.Minute), "v-later"},
		{"just", now.Add(time.Nanosecond), "v-just"},
		{"now", now, ""},
		{"past", now.Add(-time.Minute), ""},
	}
	var records []keyRecord
	for _, tt := range tests {
		k := &queue.StoredKey{Key: tt.key, Value: "v-" + tt.key, Expires: tt.expires}
		records = append(records, newKeyRecord([]*queue.StoredKey{k}, "msg-"+tt.key))
	}
	b.publishKeys(records)
	for _, tt := range tests {
		b.keysMu.Lock()
		value, _, _ := b.keys.get(tt.key)
		b.keysMu.Unlock()
		if value != tt.want {
			t.Errorf("key %q expiring at now%+v: indexed %q, want %q", tt.key, tt.expires.Sub(now), value, tt.want)
		}
	}
}
