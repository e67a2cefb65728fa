package embeddedqueue

import (
	"iter"
	"maps"
	"math/bits"
	"slices"
)

// seqTable holds the states of a queue's messages by sequence number.
//
// A queue hands out sequence numbers in order, and its messages mostly
// leave in about that order, so the states live in chunks of chunkLen
// consecutive numbers, kept in a deque by chunk number: adding a message
// writes beside the one added before it, and finding one is an index. A
// Go map put each new message at a random place of a table that grows to
// millions of entries with a backlog: a cache and TLB miss per message.
// BenchmarkSendApply's writer time per job went from about 2,450 to 1,660
// ns with this table, and BenchmarkIndexMemory from 142 to 77 bytes per
// message.
//
// Chunks hold 64 states and a bitmap of the live ones (about 33 bytes a
// message, where the map took about 60). A chunk that is not the last
// (where adds go) and has chunkThin or fewer live states left is thinned:
// they move to a map, so a message left behind by the others (a long
// delay, a lease held for hours) costs a map entry, not a chunk, and a
// thin chunk costs at most a few times what the map did for its states.
// Empty chunks at the front are dropped.
type seqTable struct {
	first  uint64   // chunk number of chunks[0]
	chunks []*chunk // nil where emptied or thinned; the first and last never are
	holes  int      // nil chunks
	sparse map[uint64]msgState
	n      int
}

const (
	chunkLen  = 64
	chunkThin = chunkLen / 8
	// maxChunkGap bounds the nil chunks a set far past the last chunk
	// would add (possible on a replay with a long run of deleted
	// messages): past it the table thins every chunk and starts again.
	maxChunkGap = 1 << 14
	// minHoled is the deque length from which holes may not take more
	// than half of it (balance).
	minHoled = 64
)

type chunk struct {
	live  uint64 // bit i: state[i] is a message's
	state [chunkLen]msgState
}

func (t *seqTable) len() int { return t.n }

// chunkOf returns the chunk of seq, nil if there is none (its states, if
// any, are in sparse).
func (t *seqTable) chunkOf(seq uint64) *chunk {
	c := seq / chunkLen
	if c < t.first || c-t.first >= uint64(len(t.chunks)) {
		return nil
	}
	return t.chunks[c-t.first]
}

func (t *seqTable) get(seq uint64) (msgState, bool) {
	if ch := t.chunkOf(seq); ch != nil {
		i := seq % chunkLen
		return ch.state[i], ch.live&(1<<i) != 0
	}
	m, ok := t.sparse[seq]
	return m, ok
}

// set stores m as message seq's state.
func (t *seqTable) set(seq uint64, m msgState) {
	if c := seq / chunkLen; len(t.chunks) == 0 || c >= t.first+uint64(len(t.chunks)) {
		t.extend(c)
	}
	if ch := t.chunkOf(seq); ch != nil {
		i := seq % chunkLen
		if ch.live&(1<<i) == 0 {
			ch.live |= 1 << i
			t.n++
		}
		ch.state[i] = m
		return
	}
	if t.sparse == nil {
		t.sparse = map[uint64]msgState{}
	}
	if _, ok := t.sparse[seq]; !ok {
		t.n++
	}
	t.sparse[seq] = m
}

// extend adds chunk c (past the last) as the new last chunk.
func (t *seqTable) extend(c uint64) {
	if len(t.chunks) > 0 && c-(t.first+uint64(len(t.chunks))) > maxChunkGap {
		for i := range t.chunks {
			if t.chunks[i] != nil {
				t.thin(i)
			}
		}
		t.chunks, t.holes = t.chunks[:0], 0
	}
	if len(t.chunks) == 0 {
		t.first = c
	}
	last := len(t.chunks) - 1
	for t.first+uint64(len(t.chunks)) < c {
		t.chunks = append(t.chunks, nil)
		t.holes++
	}
	t.chunks = append(t.chunks, &chunk{})
	// The chunk that was last is now one like the others.
	if last >= 0 {
		t.tidy(last)
	}
	t.balance()
}

// del forgets message seq and returns the state it had, if any.
func (t *seqTable) del(seq uint64) (msgState, bool) {
	if ch := t.chunkOf(seq); ch != nil {
		i := seq % chunkLen
		if ch.live&(1<<i) == 0 {
			return msgState{}, false
		}
		m := ch.state[i]
		ch.live &^= 1 << i
		ch.state[i] = msgState{}
		t.n--
		t.tidy(int(seq/chunkLen - t.first))
		return m, true
	}
	m, ok := t.sparse[seq]
	if ok {
		delete(t.sparse, seq)
		t.n--
	}
	return m, ok
}

// tidy thins chunks[i] if it is not the last and has few live states
// left, and drops the nil chunks at the front.
func (t *seqTable) tidy(i int) {
	if i == len(t.chunks)-1 || bits.OnesCount64(t.chunks[i].live) > chunkThin {
		return
	}
	t.thin(i)
	t.trimFront()
	t.balance()
}

// trimFront drops the nil chunks at the front.
func (t *seqTable) trimFront() {
	k := 0
	for k < len(t.chunks)-1 && t.chunks[k] == nil {
		k++
	}
	t.chunks, t.first, t.holes = t.chunks[k:], t.first+uint64(k), t.holes-k
}

// balance thins the front chunk while holes take more than half of a long
// deque: a chunk that keeps a few more than chunkThin messages for hours
// (nine long leases of one batch) would otherwise keep every chunk slot
// after it, thinned or emptied, and the deque would grow with the
// messages passing through, not the messages held.
func (t *seqTable) balance() {
	for len(t.chunks) > minHoled && t.holes > len(t.chunks)/2 {
		t.thin(0)
		t.trimFront()
	}
}

// thin moves chunks[i]'s live states to sparse and drops the chunk.
func (t *seqTable) thin(i int) {
	ch := t.chunks[i]
	base := (t.first + uint64(i)) * chunkLen
	for live := ch.live; live != 0; live &= live - 1 {
		j := uint64(bits.TrailingZeros64(live))
		if t.sparse == nil {
			t.sparse = map[uint64]msgState{}
		}
		t.sparse[base+j] = ch.state[j]
	}
	t.chunks[i] = nil
	t.holes++
}

// lowest returns a sequence number no live message is below: the
// first chunk's first, or a thinned message's below it; the largest
// number there is when the table is empty.
func (t *seqTable) lowest() uint64 {
	low := t.first * chunkLen
	if len(t.chunks) == 0 {
		low = ^uint64(0)
	}
	for seq := range t.sparse {
		low = min(low, seq)
	}
	return low
}

// all yields every message's sequence number and state: the chunks' in
// order, then the thinned ones in no order.
func (t *seqTable) all() iter.Seq2[uint64, msgState] {
	return func(yield func(uint64, msgState) bool) {
		for i, ch := range t.chunks {
			if ch == nil {
				continue
			}
			base := (t.first + uint64(i)) * chunkLen
			for live := ch.live; live != 0; live &= live - 1 {
				j := uint64(bits.TrailingZeros64(live))
				if !yield(base+j, ch.state[j]) {
					return
				}
			}
		}
		for seq, m := range t.sparse {
			if !yield(seq, m) {
				return
			}
		}
	}
}

// compactStorage moves the table into storage sized for what it holds:
// Go maps never give back their buckets, nor slices their arrays.
func (t *seqTable) compactStorage() {
	t.chunks = slices.Clip(slices.Clone(t.chunks))
	if len(t.sparse) == 0 {
		t.sparse = nil
		return
	}
	sparse := make(map[uint64]msgState, len(t.sparse)) // maps.Clone keeps the size
	maps.Copy(sparse, t.sparse)
	t.sparse = sparse
}
