package embeddedqueue

import (
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// class says which Stats count a message falls under.
type class uint8

const (
	classVisible class = iota
	classInFlight
	classDelayed
	numClasses
)

// msgState is the in-memory state of one stored message: 32 bytes, no
// body. The durable copy is the 24-byte record in the queue's state bucket.
type msgState struct {
	sentAt    int64 // unix nanoseconds, kept across a redrive
	visibleAt int64
	receives  uint32
	gen       uint32 // bumped on every receive; part of the receipt handle
	ver       uint32 // bumped on every re-filing; heap entries carry it
	class     class
}

// Heap entries. Heaps are lazy: re-filing a message pushes a new entry
// with a new ver and the old one is dropped when it surfaces.
type (
	readyEntry struct { // 16 bytes
		seq uint64
		ver uint32
	}
	pendingEntry struct { // 24 bytes
		at  int64 // visibleAt
		seq uint64
		ver uint32
	}
	ageEntry struct { // 16 bytes; valid while the message exists
		at  int64 // sentAt
		seq uint64
	}
)

func bySeq(a, b readyEntry) bool { return a.seq < b.seq }

func byVisibleAt(a, b pendingEntry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

func bySentAt(a, b ageEntry) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// memQueue indexes one queue:
//   - ready: visible messages by sequence number (send order);
//   - pending: invisible ones (delayed or in flight) by visible-at,
//     promoted to ready when their time comes;
//   - age: every message by sent-at, for OldestAge and retention.
//
// Counts per class are kept up to date so Stats needs no scan. The
// Backend's mutex guards every field.
type memQueue struct {
	spec    queue.QueueSpec
	id      uint64 // incarnation, part of every receipt handle
	nextSeq uint64
	// crcFrom is the first sequence number whose record carries a
	// checksum: the queue's next one when the store was upgraded to
	// format 3, zero for a queue made since (store.go).
	crcFrom uint64
	msgs    seqTable
	ready   heap[readyEntry]
	pending heap[pendingEntry]
	age     heap[ageEntry]
	counts  [numClasses]int64
	// peak is the most messages held since the index last shrank.
	peak int
	// signal is closed when a receive might now find a message, or the
	// earliest pending time moved; nil while nobody waits.
	signal chan struct{}
	// recent holds the records of the messages added since the last
	// checkpoint began, committing those of the checkpoint under way:
	// while it commits, the store cannot be read, and a receive reads
	// them here (writer.go). The writer's.
	recent, committing records
	// freshSeq is where ReceiveSentAfter's last search for messages
	// sent at or after freshAfter found the first (fresh.go); 0 until
	// one ran.
	freshSeq   uint64
	freshAfter int64
	// freshPassed counts the sequence numbers those searches passed
	// over, starting over included (tests).
	freshPassed uint64
	// freshVisible: no message between freshSeq and it is visible, as
	// the last search found (and madeVisible keeps true).
	freshVisible uint64
}

// records are message records by sequence number, from first on.
type records struct {
	first uint64
	recs  [][]byte
}

// add appends seq's record; sequence numbers of one queue come in order,
// and a gap (not expected) starts over.
func (rs *records) add(seq uint64, rec []byte) {
	if len(rs.recs) == 0 || seq != rs.first+uint64(len(rs.recs)) {
		rs.first, rs.recs = seq, rs.recs[:0]
	}
	rs.recs = append(rs.recs, rec)
}

func (rs *records) get(seq uint64) ([]byte, bool) {
	if seq < rs.first || seq-rs.first >= uint64(len(rs.recs)) {
		return nil, false
	}
	return rs.recs[seq-rs.first], true
}

// record returns message seq's record if it is held in memory.
func (q *memQueue) record(seq uint64) ([]byte, bool) {
	if rec, ok := q.recent.get(seq); ok {
		return rec, true
	}
	return q.committing.get(seq)
}

func newMemQueue(spec queue.QueueSpec, id uint64) *memQueue {
	return &memQueue{
		spec:    spec,
		id:      id,
		nextSeq: 1,
		ready:   heap[readyEntry]{less: bySeq},
		pending: heap[pendingEntry]{less: byVisibleAt},
		age:     heap[ageEntry]{less: bySentAt},
	}
}

// put stores m as the state of message seq and files it as visible or
// pending. It returns the state as stored (class and ver set).
func (q *memQueue) put(seq uint64, m msgState, now int64) msgState {
	if old, ok := q.msgs.get(seq); ok {
		q.counts[old.class]--
		m.ver = old.ver + 1
	} else {
		q.age.push(ageEntry{at: m.sentAt, seq: seq})
		q.nextSeq = max(q.nextSeq, seq+1)
		q.peak = max(q.peak, q.msgs.len()+1)
	}
	m.class = classOf(m, now)
	q.counts[m.class]++
	q.msgs.set(seq, m)
	if m.class == classVisible {
		q.ready.push(readyEntry{seq: seq, ver: m.ver})
		q.madeVisible(seq)
		q.wake()
	} else {
		q.pending.push(pendingEntry{at: m.visibleAt, seq: seq, ver: m.ver})
		if top := q.pending.peek(); top.seq == seq && top.ver == m.ver {
			q.wake() // waiters may be sleeping until a later time
		}
	}
	q.compact()
	return m
}

func classOf(m msgState, now int64) class {
	switch {
	case m.visibleAt <= now:
		return classVisible
	case m.receives > 0:
		return classInFlight
	default:
		return classDelayed
	}
}

// remove forgets message seq. Its heap entries go stale.
func (q *memQueue) remove(seq uint64) {
	if m, ok := q.msgs.del(seq); ok {
		q.counts[m.class]--
	}
	if q.peak > shrinkMin && q.msgs.len() < q.peak/4 {
		q.shrink()
	}
}

// promote moves pending messages whose time has come to ready.
func (q *memQueue) promote(now int64) {
	for q.pending.len() > 0 && q.pending.peek().at <= now {
		e := q.pending.pop()
		m, ok := q.msgs.get(e.seq)
		if !ok || m.ver != e.ver {
			continue
		}
		q.counts[m.class]--
		m.class = classVisible
		q.counts[m.class]++
		q.msgs.set(e.seq, m)
		q.ready.push(readyEntry{seq: e.seq, ver: e.ver})
		q.madeVisible(e.seq)
	}
}

// isReady reports whether e is the live ready entry of its message.
func (q *memQueue) isReady(e readyEntry) bool {
	m, ok := q.msgs.get(e.seq)
	return ok && m.ver == e.ver && m.class == classVisible
}

// popVisible takes the visible message with the lowest sequence number.
// The caller re-files it with put or drops it with remove.
func (q *memQueue) popVisible(now int64) (uint64, bool) {
	q.promote(now)
	for q.ready.len() > 0 {
		if e := q.ready.pop(); q.isReady(e) {
			return e.seq, true
		}
	}
	return 0, false
}

// peekVisible returns the message popVisible would take, leaving it.
func (q *memQueue) peekVisible(now int64) (uint64, bool) {
	if !q.hasVisible(now) {
		return 0, false
	}
	return q.ready.peek().seq, true
}

// hasVisible reports whether popVisible would find a message.
func (q *memQueue) hasVisible(now int64) bool {
	q.promote(now)
	for q.ready.len() > 0 {
		if q.isReady(q.ready.peek()) {
			return true
		}
		q.ready.pop()
	}
	return false
}

// nextVisibleAt is the earliest time a pending message becomes visible,
// and false when none is pending.
func (q *memQueue) nextVisibleAt() (int64, bool) {
	for q.pending.len() > 0 {
		e := q.pending.peek()
		if m, ok := q.msgs.get(e.seq); ok && m.ver == e.ver {
			return e.at, true
		}
		q.pending.pop()
	}
	return 0, false
}

// oldest returns the message with the earliest sent-at.
func (q *memQueue) oldest() (ageEntry, bool) {
	for q.age.len() > 0 {
		e := q.age.peek()
		if _, ok := q.msgs.get(e.seq); ok {
			return e, true
		}
		q.age.pop()
	}
	return ageEntry{}, false
}

// waiter returns a channel closed at the next wake.
func (q *memQueue) waiter() <-chan struct{} {
	if q.signal == nil {
		q.signal = make(chan struct{})
	}
	return q.signal
}

func (q *memQueue) wake() {
	if q.signal != nil {
		close(q.signal)
		q.signal = nil
	}
}

func (q *memQueue) stats(now time.Time) queue.Stats {
	n := now.UnixNano()
	q.promote(n)
	s := queue.Stats{
		Queue:    q.spec.Name,
		Visible:  q.counts[classVisible],
		InFlight: q.counts[classInFlight],
		Delayed:  q.counts[classDelayed],
	}
	if e, ok := q.oldest(); ok {
		s.OldestAge = max(time.Duration(n-e.at), 0)
	}
	return s
}

// compact rebuilds heaps that have gathered more stale entries than live
// ones (say, a message whose lease is extended every few seconds for
// hours), so memory stays proportional to the messages held.
func (q *memQueue) compact() {
	const slack = 1024
	live := q.msgs.len()
	if q.ready.len()+q.pending.len() > 2*live+slack {
		q.refileLeases()
	}
	if q.age.len() > 2*live+slack {
		q.refileAges()
	}
}

// shrinkMin is the fewest messages an index must have held before it
// shrinks: below it the storage is small anyway.
const shrinkMin = 4096

// shrink moves the index into storage sized for the messages it holds,
// once they are under a quarter of the most it held since it last
// shrank: Go maps never give back their buckets, nor slices their
// arrays, so a drained backlog of millions kept its memory until a
// restart. Each shrink costs the messages left, at least three times as
// many removes ago.
func (q *memQueue) shrink() {
	q.msgs.compactStorage()
	q.peak = q.msgs.len()
	q.ready.items, q.pending.items, q.age.items = nil, nil, nil
	q.refileLeases()
	q.refileAges()
}

// refileLeases rebuilds the ready and pending heaps from the messages,
// dropping stale entries.
func (q *memQueue) refileLeases() {
	q.ready.items, q.pending.items = q.ready.items[:0], q.pending.items[:0]
	for seq, m := range q.msgs.all() {
		if m.class == classVisible {
			q.ready.items = append(q.ready.items, readyEntry{seq: seq, ver: m.ver})
		} else {
			q.pending.items = append(q.pending.items, pendingEntry{at: m.visibleAt, seq: seq, ver: m.ver})
		}
	}
	q.ready.init()
	q.pending.init()
}

// refileAges rebuilds the age heap from the messages.
func (q *memQueue) refileAges() {
	q.age.items = q.age.items[:0]
	for seq, m := range q.msgs.all() {
		q.age.items = append(q.age.items, ageEntry{at: m.sentAt, seq: seq})
	}
	q.age.init()
}

// heap is a binary min-heap. Unlike container/heap it does not box each
// pushed entry in an interface.
type heap[T any] struct {
	items []T
	less  func(a, b T) bool
}

func (h *heap[T]) len() int { return len(h.items) }
func (h *heap[T]) peek() T  { return h.items[0] }

func (h *heap[T]) push(e T) {
	h.items = append(h.items, e)
	h.up(len(h.items) - 1)
}

func (h *heap[T]) pop() T {
	top := h.items[0]
	last := len(h.items) - 1
	h.items[0] = h.items[last]
	h.items = h.items[:last]
	if last > 0 {
		h.down(0)
	}
	return top
}

func (h *heap[T]) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *heap[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.less(h.items[i], h.items[parent]) {
			return
		}
		h.items[i], h.items[parent] = h.items[parent], h.items[i]
		i = parent
	}
}

func (h *heap[T]) down(i int) {
	n := len(h.items)
	for {
		smallest, l, r := i, 2*i+1, 2*i+2
		if l < n && h.less(h.items[l], h.items[smallest]) {
			smallest = l
		}
		if r < n && h.less(h.items[r], h.items[smallest]) {
			smallest = r
		}
		if smallest == i {
			return
		}
		h.items[i], h.items[smallest] = h.items[smallest], h.items[i]
		i = smallest
	}
}
