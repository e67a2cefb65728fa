package embeddedqueue

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/queue"
)

// TestNewRecords: each stored body gets its own record, a random ID
// followed by the body, cut from one array so that none can grow into
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
				if string(rec[idLen:]) != tt.bodies[i] || cap(rec) != len(rec) {
					t.Errorf("record %d = %q (cap %d), want an ID and %q, capped", i, rec, cap(rec), tt.bodies[i])
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
