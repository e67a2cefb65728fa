package embeddedqueue

import (
	"math/rand/v2"
	"testing"
)

// TestSeqTableAgainstAMap runs random adds (in order, as a queue hands out
// sequence numbers), updates, deletes in and out of order and sets far
// ahead (a replay over deleted messages) against a map, checking every
// state, the count and the iteration, and that chunks stay bounded.
func TestSeqTableAgainstAMap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		seed       uint64
		inOrderDel int // percent of deletes that take the oldest message
	}{
		{"fifo", 1, 95},
		{"random", 2, 0},
		{"mixed", 3, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(tc.seed, tc.seed))
			var tab seqTable
			model := map[uint64]msgState{}
			next := uint64(1)
			var live []uint64 // sequence numbers in model, oldest first (with holes trimmed lazily)
			for step := range 200_000 {
				switch r := rng.IntN(100); {
				case r < 45: // add
					m := msgState{sentAt: int64(next), ver: uint32(step)}
					tab.set(next, m)
					model[next] = m
					live = append(live, next)
					next++
				case r < 55: // update
					if len(live) > 0 {
						seq := live[rng.IntN(len(live))]
						if _, ok := model[seq]; ok {
							m := msgState{sentAt: int64(seq), receives: uint32(step)}
							tab.set(seq, m)
							model[seq] = m
						}
					}
				case r < 99: // delete
					if len(live) == 0 {
						continue
					}
					i := 0
					if rng.IntN(100) >= tc.inOrderDel {
						i = rng.IntN(len(live))
					}
					seq := live[i]
					live = append(live[:i], live[i+1:]...)
					if got, ok := tab.del(seq); !ok || got != model[seq] {
						t.Fatalf("del(%d) = %+v, %v; want %+v", seq, got, ok, model[seq])
					}
					if _, ok := tab.del(seq); ok {
						t.Fatalf("del(%d) again found it", seq)
					}
					delete(model, seq)
				default: // a set far ahead, as a replay over a long run of deleted messages
					next += uint64(rng.IntN(4)) * maxChunkGap * chunkLen / 2
					m := msgState{sentAt: int64(next)}
					tab.set(next, m)
					model[next] = m
					live = append(live, next)
					next++
				}
				if step%997 == 0 {
					checkSeqTable(t, &tab, model)
				}
			}
			checkSeqTable(t, &tab, model)
			for seq := range model {
				tab.del(seq)
			}
			if tab.len() != 0 || len(tab.sparse) != 0 || len(tab.chunks) > 1 {
				t.Fatalf("emptied: len %d, sparse %d, chunks %d", tab.len(), len(tab.sparse), len(tab.chunks))
			}
		})
	}
}

func checkSeqTable(t *testing.T, tab *seqTable, model map[uint64]msgState) {
	t.Helper()
	if tab.len() != len(model) {
		t.Fatalf("len %d, want %d", tab.len(), len(model))
	}
	for seq, want := range model {
		if got, ok := tab.get(seq); !ok || got != want {
			t.Fatalf("get(%d) = %+v, %v; want %+v", seq, got, ok, want)
		}
	}
	seen := 0
	for seq, m := range tab.all() {
		if want, ok := model[seq]; !ok || m != want {
			t.Fatalf("all yielded %d: %+v, want %+v (in model: %v)", seq, m, want, ok)
		}
		seen++
	}
	if seen != len(model) {
		t.Fatalf("all yielded %d, want %d", seen, len(model))
	}
	// Every chunk but the last holds more than chunkThin states, and no
	// state is both in a chunk and in sparse.
	for i, ch := range tab.chunks {
		if i == len(tab.chunks)-1 {
			if ch == nil {
				t.Fatal("the last chunk is nil")
			}
			continue
		}
		if i == 0 && ch == nil {
			t.Fatal("a nil chunk at the front")
		}
		if ch != nil && popcount(ch.live) <= chunkThin {
			t.Fatalf("chunk %d of %d holds %d states", i, len(tab.chunks), popcount(ch.live))
		}
	}
	holes := 0
	for _, ch := range tab.chunks {
		if ch == nil {
			holes++
		}
	}
	if holes != tab.holes || (len(tab.chunks) > minHoled && holes > len(tab.chunks)/2) {
		t.Fatalf("%d holes (counted %d) in %d chunks", holes, tab.holes, len(tab.chunks))
	}
	for seq := range tab.sparse {
		if tab.chunkOf(seq) != nil {
			t.Fatalf("message %d is in sparse and its chunk", seq)
		}
	}
}

func popcount(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// TestSeqTableStragglers: messages left behind by the others (one in 64
// held for a long time while the rest come and go) cost map entries, not
// a chunk each.
func TestSeqTableStragglers(t *testing.T) {
	t.Parallel()
	var tab seqTable
	for seq := range uint64(64 * 10_000) {
		tab.set(seq, msgState{sentAt: 1})
		if seq%64 != 0 {
			tab.del(seq)
		}
	}
	if tab.len() != 10_000 || len(tab.chunks) > 2 || len(tab.sparse) < 9_998 {
		t.Fatalf("len %d, chunks %d, sparse %d; want 10000 messages in about 1 chunk and the rest in sparse", tab.len(), len(tab.chunks), len(tab.sparse))
	}
}

// TestSeqTableLongLeases: a chunk that keeps a few more messages than
// chunkThin (nine long leases of one batch) while millions pass after it
// does not keep a slot for every chunk since.
func TestSeqTableLongLeases(t *testing.T) {
	t.Parallel()
	var tab seqTable
	const held = chunkThin + 1
	for seq := range uint64(64 * 100_000) {
		tab.set(seq, msgState{sentAt: 1})
		if seq >= held {
			tab.del(seq)
		}
	}
	if tab.len() != held || len(tab.chunks) > 2*minHoled {
		t.Fatalf("len %d, %d chunks (%d holes); want %d messages in a short deque", tab.len(), len(tab.chunks), tab.holes, held)
	}
	for seq := range uint64(held) {
		if _, ok := tab.get(seq); !ok {
			t.Fatalf("message %d lost", seq)
		}
	}
}
