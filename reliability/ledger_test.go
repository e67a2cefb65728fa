package reliability

import (
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
)

// TestLedgerCheck feeds a ledger known answers and arrivals and checks
// each figure of the accounting.
func TestLedgerCheck(t *testing.T) {
	type sub struct {
		code  codes.Code // OK: acknowledged as id
		id    string
		kind  string
		deliv int    // acknowledged deliveries
		dlq   int    // copies in a DLQ
		queue bool   // left in a live queue
		as    string // job id it arrived under, if not id
	}
	tests := []struct {
		name string
		subs []sub
		want Accounting
	}{
		{
			name: "delivered, dead-lettered, duplicated",
			subs: []sub{
				{id: "a", kind: KindOK, deliv: 1},
				{id: "b", kind: KindOK, deliv: 3},
				{id: "c", kind: KindPoison, dlq: 1},
				{id: "d", kind: KindOK, dlq: 2},
			},
			want: Accounting{
				Submitted: 4, Acked: 4, Delivered: 2, DeadLettered: 2, HealthyDeadLettered: 1,
				Duplicates: 2, MaxDeliveries: 3, DLQDuplicates: 1,
			},
		},
		{
			name: "lost",
			subs: []sub{{id: "a", kind: KindOK}, {id: "b", kind: KindOK, deliv: 1}},
			want: Accounting{Submitted: 2, Acked: 2, Delivered: 1, Lost: 1, LostIDs: []string{"a (ok)"}, MaxDeliveries: 1},
		},
		{
			name: "left in a queue is not lost, but reported",
			subs: []sub{{id: "a", kind: KindPoison, queue: true}, {id: "b", kind: KindOK, deliv: 1, queue: true}},
			want: Accounting{Submitted: 2, Acked: 2, Delivered: 1, Queued: 1, QueuedIDs: []string{"a (poison)"}, MaxDeliveries: 1},
		},
		{
			name: "unknown may arrive, refused may not",
			subs: []sub{
				{code: codes.Unavailable, kind: KindOK, deliv: 1, as: "u1"},
				{code: codes.Unavailable, kind: KindOK},
				{code: codes.ResourceExhausted, kind: KindOK, deliv: 1, as: "r1"},
			},
			want: Accounting{Submitted: 3, Unknown: 2, Refused: 1, UnknownArrived: 1, RefusedArrived: 1, MaxDeliveries: 1},
		},
		{
			name: "a payload delivered under another job id is a stray",
			subs: []sub{{id: "a", kind: KindOK, deliv: 1, as: "z"}},
			want: Accounting{Submitted: 1, Acked: 1, Lost: 1, LostIDs: []string{"a (ok)"}, Strays: 1, MaxDeliveries: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Ledger
			delivered, payloads := map[string]int{}, map[string]string{}
			var dlq, queued []DeadLetter
			for _, s := range tt.subs {
				seq, p := l.Next(Mix{}, 0)
				l.entries[seq].kind = s.kind
				if s.code == codes.OK {
					l.Ack(seq, s.id)
				} else {
					l.Fail(seq, s.code)
				}
				id := s.id
				if s.as != "" {
					id = s.as
				}
				if s.deliv > 0 {
					delivered[id] = s.deliv
					payloads[id] = string(p)
				}
				for range s.dlq {
					dlq = append(dlq, DeadLetter{JobID: id, Payload: string(p)})
				}
				if s.queue {
					queued = append(queued, DeadLetter{JobID: id, Payload: string(p)})
				}
			}
			got := l.Check(delivered, payloads, dlq, queued)
			if got.Lost != tt.want.Lost || len(got.LostIDs) != len(tt.want.LostIDs) {
				t.Errorf("lost %d %v, want %d %v", got.Lost, got.LostIDs, tt.want.Lost, tt.want.LostIDs)
			}
			if !reflect.DeepEqual(got.QueuedIDs, tt.want.QueuedIDs) {
				t.Errorf("queued %v, want %v", got.QueuedIDs, tt.want.QueuedIDs)
			}
			got.LostIDs, tt.want.LostIDs = nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if (len(got.Violations()) > 0) != (tt.want.Lost+tt.want.Queued+tt.want.RefusedArrived+tt.want.Strays > 0) {
				t.Errorf("violations %v", got.Violations())
			}
		})
	}
}

func TestParsePayload(t *testing.T) {
	var l Ledger
	l.Next(Mix{}, 0)
	seq, p := l.Next(Mix{Poison: 1}, 300)
	if len(p) != 300 {
		t.Fatalf("payload of %d bytes, want 300", len(p))
	}
	got, kind, ok := ParsePayload(string(p))
	if !ok || got != seq || kind != KindPoison {
		t.Fatalf("ParsePayload(%q) = %d %q %t, want %d poison", p[:20], got, kind, ok, seq)
	}
	for _, bad := range []string{"", "rel/", "rel/x/ok/", "hello"} {
		if _, _, ok := ParsePayload(bad); ok {
			t.Errorf("ParsePayload(%q) ok", bad)
		}
	}
}
