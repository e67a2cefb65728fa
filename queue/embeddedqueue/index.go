package embeddedqueue

import (
	"container/heap"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// msgState is the in-memory state of one stored message. Bodies stay on
// disk; this is about 48 bytes per message.
type msgState struct {
	sentAt       int64 // unix nanoseconds
	visibleAt    int64
	receiveCount uint32
	gen          uint32 // bumped on every receive; part of the receipt handle
	ver          uint64 // bumped on every change; validates heap entries
}

// entry is a heap item; it is stale unless ver matches the message's.
type entry struct {
	seq uint64
	at  int64 // visibleAt for the pending heap
	ver uint64
}

// memQueue indexes one queue: visible messages in send order, and
// invisible ones (delayed or in flight) by the time they become visible.
// Heaps are lazy: a changed message gets a new entry and the old one is
// skipped when it surfaces.
type memQueue struct {
	spec    queue.QueueSpec
	nextSeq uint64
	msgs    map[uint64]*msgState
	ready   seqHeap
	pending timeHeap
	ver     uint64
	signal  chan struct{} // closed and replaced when a message may have become visible
}

func newMemQueue(spec queue.QueueSpec) *memQueue {
	return &memQueue{spec: spec, nextSeq: 1, msgs: map[uint64]*msgState{}, signal: make(chan struct{})}
}

// place files a message under its current state.
func (q *memQueue) place(seq uint64, m *msgState, now int64) {
	q.ver++
	m.ver = q.ver
	if m.visibleAt <= now {
		heap.Push(&q.ready, entry{seq: seq, ver: m.ver})
		q.wake()
		return
	}
	heap.Push(&q.pending, entry{seq: seq, at: m.visibleAt, ver: m.ver})
}

func (q *memQueue) wake() {
	close(q.signal)
	q.signal = make(chan struct{})
}

// promote moves pending messages whose time has come to ready.
func (q *memQueue) promote(now int64) {
	for q.pending.Len() > 0 && q.pending[0].at <= now {
		e := heap.Pop(&q.pending).(entry)
		if m := q.msgs[e.seq]; m != nil && m.ver == e.ver {
			heap.Push(&q.ready, entry{seq: e.seq, ver: e.ver})
		}
	}
}

// popVisible returns the oldest visible message, or 0.
func (q *memQueue) popVisible(now int64) uint64 {
	q.promote(now)
	for q.ready.Len() > 0 {
		e := heap.Pop(&q.ready).(entry)
		if m := q.msgs[e.seq]; m != nil && m.ver == e.ver && m.visibleAt <= now {
			return e.seq
		}
	}
	return 0
}

// hasVisible reports whether a receive would find a message now.
func (q *memQueue) hasVisible(now int64) bool {
	q.promote(now)
	for q.ready.Len() > 0 {
		e := q.ready[0]
		if m := q.msgs[e.seq]; m != nil && m.ver == e.ver && m.visibleAt <= now {
			return true
		}
		heap.Pop(&q.ready)
	}
	return false
}

// nextVisibleAt is the earliest time a pending message becomes visible, or
// 0 when none is pending.
func (q *memQueue) nextVisibleAt() int64 {
	for q.pending.Len() > 0 {
		e := q.pending[0]
		if m := q.msgs[e.seq]; m != nil && m.ver == e.ver {
			return e.at
		}
		heap.Pop(&q.pending)
	}
	return 0
}

func (q *memQueue) stats(name string, now time.Time) queue.Stats {
	s := queue.Stats{Queue: name}
	n := now.UnixNano()
	oldest := int64(0)
	for _, m := range q.msgs {
		switch {
		case m.visibleAt <= n:
			s.Visible++
		case m.receiveCount > 0:
			s.InFlight++
		default:
			s.Delayed++
		}
		if oldest == 0 || m.sentAt < oldest {
			oldest = m.sentAt
		}
	}
	if oldest > 0 {
		s.OldestAge = max(time.Duration(n-oldest), 0)
	}
	return s
}

type seqHeap []entry

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h seqHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *seqHeap) Push(x any)        { *h = append(*h, x.(entry)) }
func (h *seqHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type timeHeap []entry

func (h timeHeap) Len() int { return len(h) }
func (h timeHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)   { *h = append(*h, x.(entry)) }
func (h *timeHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
