package router

import (
	"slices"
	"testing"
)

// fuzzShape maps fuzzed integers onto a lane the topology allows (1 to
// 1000 shards) and a k that exercises clamping on both sides.
func fuzzShape(shardsIn uint16, kIn int16) (shards, k int) {
	return int(shardsIn%1000) + 1, int(kIn)
}

func addSeeds(f *testing.F) {
	f.Add("acme", "standard", uint16(15), int16(2), []byte{3, 1})
	f.Add("globex", "premium", uint16(99), int16(3), []byte{0, 0, 0})
	f.Add("", "", uint16(0), int16(0), []byte(nil))
	f.Add("t", "free", uint16(7), int16(-5), []byte{255, 1, 255})
	f.Add("ünïcødé", "x", uint16(999), int16(40), []byte{9, 8, 7, 6, 5, 4, 3, 2, 1})
	f.Add("noisy", "standard", uint16(3), int16(4), []byte{2, 2, 2, 2})
}

// FuzzShardSet checks the shard set invariants (distinct, in range, length
// min(max(k,1), N), deterministic), that AppendShardSet keeps dst, that the
// k-set is a prefix of the (k+1)-set, and the rendezvous growth property:
// adding shard N moves the tenant only onto shard N.
func FuzzShardSet(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, tenant, lane string, shardsIn uint16, kIn int16, _ []byte) {
		shards, k := fuzzShape(shardsIn, kIn)
		set := ShardSet(tenant, lane, shards, k)
		checkSet(t, set, shards, k)
		if again := AppendShardSet([]int{-1}, tenant, lane, shards, k); again[0] != -1 || !slices.Equal(again[1:], set) {
			t.Fatalf("AppendShardSet([-1]) = %v, want [-1] then %v", again, set)
		}
		if k >= 1 && k < shards {
			if wider := ShardSet(tenant, lane, shards, k+1); !slices.Equal(wider[:k], set) {
				t.Fatalf("k=%d set %v is not a prefix of k=%d set %v", k, set, k+1, wider)
			}
		}
		grown := ShardSet(tenant, lane, shards+1, k)
		checkSet(t, grown, shards+1, k)
		kept := slices.DeleteFunc(slices.Clone(grown), func(s int) bool { return s == shards })
		if !slices.Equal(kept, set[:len(kept)]) {
			t.Fatalf("growing %d→%d shards moved %v to %v, not just onto the new shard", shards, shards+1, set, grown)
		}
	})
}

// FuzzPick checks that Pick returns a member of the tenant's shard set
// with the least depth, the earliest such member in set order, and that
// it asks for each member's depth exactly once. Depths come from the byte
// tape as small signed values, so ties are common.
func FuzzPick(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, tenant, lane string, shardsIn uint16, kIn int16, tape []byte) {
		shards, k := fuzzShape(shardsIn, kIn)
		depth := func(s int) int64 {
			if len(tape) == 0 {
				return 0
			}
			return int64(int8(tape[s%len(tape)])) % 4
		}
		set := ShardSet(tenant, lane, shards, k)
		checkSet(t, set, shards, k)

		asked := map[int]int{}
		got := Pick(tenant, lane, shards, k, func(s int) int64 {
			asked[s]++
			return depth(s)
		})
		pos := slices.Index(set, got)
		if pos < 0 {
			t.Fatalf("Pick = %d, not in set %v", got, set)
		}
		for i, s := range set {
			if asked[s] != 1 {
				t.Fatalf("depth(%d) asked %d times, want once", s, asked[s])
			}
			if d := depth(s); d < depth(got) || (d == depth(got) && i < pos) {
				t.Fatalf("Pick = %d (depth %d, position %d), but shard %d has depth %d at position %d; set %v",
					got, depth(got), pos, s, d, i, set)
			}
		}
		if len(asked) != len(set) {
			t.Fatalf("depth asked for %d shards, want the %d of set %v", len(asked), len(set), set)
		}
		if again := Pick(tenant, lane, shards, k, depth); again != got {
			t.Fatalf("Pick not deterministic: %d then %d", got, again)
		}
	})
}
