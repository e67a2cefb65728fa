package embeddedqueue

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// FuzzIndex drives the lazy-heap index with a byte tape of operations
// against a fake clock and compares every answer with a brute-force model.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 1, 5, 4, 3, 1, 5})
	f.Add([]byte{0, 3, 0, 0, 1, 2, 3, 7, 4, 9, 1, 1, 5, 2, 0, 5})
	f.Add([]byte{0, 1, 1, 3, 0, 3, 0, 3, 0, 3, 0, 4, 5, 1, 1, 5})
	f.Fuzz(func(t *testing.T, tape []byte) {
		q := newMemQueue(queue.QueueSpec{Name: "q"}, 1)
		model := map[uint64]msgState{}
		now := int64(1000)
		next := func() int64 {
			if len(tape) == 0 {
				return 0
			}
			v := tape[0]
			tape = tape[1:]
			return int64(v)
		}
		pick := func() (uint64, bool) {
			if len(model) == 0 {
				return 0, false
			}
			keys := slices.Sorted(maps.Keys(model))
			return keys[int(next())%len(keys)], true
		}
		for len(tape) > 0 {
			switch next() % 6 {
			case 0: // send, possibly delayed
				m := msgState{sentAt: now - next(), visibleAt: now + next()%3*int64(time.Second)}
				seq := q.nextSeq
				q.put(seq, m, now)
				model[seq] = m
			case 1: // receive: take the oldest visible, then lease or redrive it
				want, wantOK := uint64(0), false
				for seq, m := range model {
					if m.visibleAt <= now && (!wantOK || seq < want) {
						want, wantOK = seq, true
					}
				}
				if q.hasVisible(now) != wantOK {
					t.Fatalf("hasVisible %t, want %t", !wantOK, wantOK)
				}
				seq, ok := q.popVisible(now)
				if ok != wantOK || seq != want {
					t.Fatalf("popVisible (%d, %t), want (%d, %t)", seq, ok, want, wantOK)
				}
				if !ok {
					continue
				}
				m := model[seq]
				if next()%4 == 0 {
					q.remove(seq)
					delete(model, seq)
					continue
				}
				m.receives++
				m.visibleAt = now + (1+next()%3)*int64(time.Second)
				q.put(seq, m, now)
				model[seq] = m
			case 2: // delete
				if seq, ok := pick(); ok {
					q.remove(seq)
					delete(model, seq)
				}
			case 3: // change visibility
				if seq, ok := pick(); ok {
					m := model[seq]
					m.visibleAt = now + next()%3*int64(time.Second)
					q.put(seq, m, now)
					model[seq] = m
				}
			case 4: // time passes
				now += next() * int64(100*time.Millisecond)
			case 5:
				checkIndex(t, q, model, now)
			}
		}
		checkIndex(t, q, model, now)
	})
}

func checkIndex(t *testing.T, q *memQueue, model map[uint64]msgState, now int64) {
	t.Helper()
	want := queue.Stats{Queue: "q"}
	oldest, nextAt := int64(0), int64(0)
	for _, m := range model {
		switch classOf(m, now) {
		case classVisible:
			want.Visible++
		case classInFlight:
			want.InFlight++
		default:
			want.Delayed++
		}
		if oldest == 0 || m.sentAt < oldest {
			oldest = m.sentAt
		}
		if m.visibleAt > now && (nextAt == 0 || m.visibleAt < nextAt) {
			nextAt = m.visibleAt
		}
	}
	if oldest != 0 {
		want.OldestAge = max(time.Duration(now-oldest), 0)
	}
	if got := q.stats(time.Unix(0, now)); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	if got, ok := q.nextVisibleAt(); got != nextAt || ok != (nextAt != 0) {
		t.Fatalf("nextVisibleAt %d, want %d", got, nextAt)
	}
	if q.msgs.len() != len(model) {
		t.Fatalf("%d messages indexed, want %d", q.msgs.len(), len(model))
	}
}

// TestIndexCompacts extends one lease many times: stale heap entries must
// not pile up.
func TestIndexCompacts(t *testing.T) {
	t.Parallel()
	q := newMemQueue(queue.QueueSpec{Name: "q"}, 1)
	now := int64(0)
	q.put(1, msgState{visibleAt: now}, now)
	seq, _ := q.popVisible(now)
	for i := range 100_000 {
		// Later each time, so old entries never surface on their own.
		q.put(seq, msgState{receives: 1, visibleAt: now + int64(i+1)*int64(time.Hour)}, now)
	}
	if n := q.ready.len() + q.pending.len(); n > 2*q.msgs.len()+1024 {
		t.Fatalf("%d heap entries for %d message", n, q.msgs.len())
	}
	if s := q.stats(time.Unix(0, now)); s.InFlight != 1 || s.Visible != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// BenchmarkIndexMemory reports the index's heap bytes per message, half
// of them leased.
func BenchmarkIndexMemory(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		q := newMemQueue(queue.QueueSpec{Name: "q"}, 1)
		for i := range uint64(n) {
			m := msgState{sentAt: int64(i), visibleAt: 0}
			if i%2 == 0 {
				m = msgState{sentAt: int64(i), visibleAt: int64(time.Hour), receives: 1}
			}
			q.put(i+1, m, 0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/msg")
		runtime.KeepAlive(q)
		if q.msgs.len() != n {
			b.Fatal(fmt.Sprint(q.msgs.len()))
		}
	}
}

// TestIndexShrinksAfterABacklog drains a backlog: the index's memory must
// follow the messages it still holds, not the most it ever held (Go maps
// never give back their buckets, nor slices their arrays). Not parallel:
// it reads the heap's size.
func TestIndexShrinksAfterABacklog(t *testing.T) {
	const n, left = 200_000, 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	q := newMemQueue(queue.QueueSpec{Name: "q"}, 1)
	for i := range uint64(n) {
		m := msgState{sentAt: int64(i)}
		if i%2 == 0 {
			m = msgState{sentAt: int64(i), visibleAt: int64(time.Hour), receives: 1}
		}
		q.put(i+1, m, 0)
	}
	for seq := uint64(1); seq <= n-left; seq++ {
		q.remove(seq)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	runtime.KeepAlive(q)
	if s := q.stats(time.Unix(0, 0)); s.Visible+s.InFlight != left {
		t.Fatalf("stats %+v, want %d messages", s, left)
	}
	if held > 1<<20 {
		t.Fatalf("the index of %d messages, once %d, holds %d KiB", left, n, held>>10)
	}
}
