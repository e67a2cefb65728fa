package embeddedqueue

import "time"

// Receiving past a backlog: Receive takes a queue's visible messages
// lowest sequence first; ReceiveSentAfter takes the lowest among those
// sent at or after a time, leaving the older ones where they are. A
// drainer whose shard holds millions of jobs left by an outage reads its
// fresh jobs that way at once, instead of after reading (and moving
// aside) the whole backlog first, which took minutes.

// freshScanStep bounds the old messages one call passes over while
// looking for the first fresh one, so that a backlog of millions holds
// the index's lock for a few milliseconds at a time; the next call goes
// on from there.
const freshScanStep = 1 << 16

// picker chooses the messages a receive claims.
type picker interface {
	// has reports whether pop would find a message; passing, that it
	// does not know yet and is to be asked again (after the index's lock
	// was let go).
	has(q *memQueue, now int64) (found, passing bool)
	// peek returns the message pop would take, leaving it.
	peek(q *memQueue, now int64) (uint64, bool)
	// pop takes the next message; the caller re-files it with put or
	// drops it with remove.
	pop(q *memQueue, now int64) (uint64, bool)
	// begin starts a claim (again, when it was held back).
	begin()
}

// headPicker takes the visible message with the lowest sequence number.
type headPicker struct{}

func (headPicker) has(q *memQueue, now int64) (bool, bool)    { return q.hasVisible(now), false }
func (headPicker) peek(q *memQueue, now int64) (uint64, bool) { return q.peekVisible(now) }
func (headPicker) pop(q *memQueue, now int64) (uint64, bool)  { return q.popVisible(now) }
func (headPicker) begin()                                     {}

// freshPicker takes the visible message with the lowest sequence number
// among those sent at or after after (unix nanoseconds). Its messages
// keep their entries in the ready heap: claimed, their state's ver moves
// on and the entries are dropped when they surface, as for any re-filed
// message.
type freshPicker struct {
	after int64
	next  uint64 // the lowest sequence number the claim may still take
}

func (p *freshPicker) begin() { p.next = 0 }

func (p *freshPicker) has(q *memQueue, now int64) (found, passing bool) {
	if _, _, ok := q.freshFrom(p.after); !ok {
		return false, true
	}
	_, found = p.find(q, now, p.next)
	return found, false
}

func (p *freshPicker) peek(q *memQueue, now int64) (uint64, bool) {
	return p.find(q, now, p.next)
}

func (p *freshPicker) pop(q *memQueue, now int64) (uint64, bool) {
	seq, ok := p.find(q, now, p.next)
	if ok {
		p.next = seq + 1
	}
	return seq, ok
}

// find returns the lowest visible message at or above from sent at or
// after p.after. It starts where the queue's last search found the first
// visible one (freshVisible), so it passes over the messages taken since
// (in flight, or done with), not every one since the first fresh
// message: a job that runs for minutes kept that one in flight, and each
// search passed over every job sent after it again.
func (p *freshPicker) find(q *memQueue, now int64, from uint64) (uint64, bool) {
	start, after, ok := q.freshFrom(p.after)
	if !ok {
		return 0, false // still passing over old messages
	}
	q.promote(now)
	low := max(start, q.freshVisible) // no visible message between start and it
	at := max(low, from)
	for ; at < q.nextSeq; at++ {
		if m, ok := q.msgs.get(at); ok && m.class == classVisible && m.sentAt >= after {
			break
		}
	}
	if from <= low {
		// Searched on from low: nothing visible before at. (From
		// further on, in a claim, a message turned visible before from
		// since the claim began would be passed over.)
		q.freshVisible = at
	}
	return at, at < q.nextSeq
}

// madeVisible is told of message seq turning visible: searches for fresh
// messages start at or before it again.
func (q *memQueue) madeVisible(seq uint64) {
	q.freshVisible = min(q.freshVisible, seq)
}

// freshRewind is how much earlier than the last search's bound a
// search's may be and still be taken as that one. Drainers ask with
// "now − the staleness bound", two pollers to a shard, and their calls
// reach the queue in any order: an earlier bound started the search
// over, from the oldest message, and pollers whose calls crossed made
// each other pass over a backlog of 5 million again and again, holding
// the lock, until deliveries stopped (found in a scale test). Taken as
// the later one, the bound leaves out the messages sent between the
// two, which are at the edge of the staleness bound and are read from
// the queue's head like any other.
const freshRewind = time.Minute

// freshFrom returns the lowest sequence number that may hold a message
// sent at or after the bound it uses, and that bound: after, or the last
// search's when after is earlier by less than freshRewind. Every message
// below the number is gone or older. It remembers where it got to, so
// that calls with a later bound pass over each old message once; a call
// with a bound earlier by freshRewind or more starts over. False means
// it passed over freshScanStep messages and is not there yet.
func (q *memQueue) freshFrom(after int64) (seq uint64, bound int64, ok bool) {
	switch {
	case q.freshSeq == 0 || after <= q.freshAfter-int64(freshRewind):
		q.freshSeq = min(q.msgs.lowest(), q.nextSeq)
		q.freshVisible = 0
	case after < q.freshAfter:
		after = q.freshAfter
	}
	q.freshAfter = after
	at, end := q.freshSeq, q.freshSeq+freshScanStep
	for ; at < q.nextSeq && at < end; at++ {
		if m, ok := q.msgs.get(at); ok && m.sentAt >= after {
			break
		}
	}
	q.freshPassed += at - q.freshSeq
	q.freshSeq = at
	if at == end && at < q.nextSeq {
		return 0, after, false
	}
	return at, after, true
}
