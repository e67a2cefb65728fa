package router

// inlineK is how many choices the hot path keeps on the stack; larger k
// still works but allocates a scratch slice.
const inlineK = 16

// ShardSet returns the tenant's shard set in lane: the k distinct shards of
// 0..shards-1 with the highest rendezvous score for (lane, tenant, shard),
// highest first, so index 0 is the tenant's first choice.
//
// k is clamped to [1, shards]; k == shards returns a permutation of all
// shards. shards < 1 is a programming error (the topology validates it) and
// returns nil.
//
// ShardSet allocates the result; hot paths use [AppendShardSet] or [Pick].
func ShardSet(tenant, lane string, shards, k int) []int {
	if shards < 1 {
		return nil
	}
	return AppendShardSet(make([]int, 0, min(max(k, 1), shards)), tenant, lane, shards, k)
}

// AppendShardSet appends the tenant's shard set (see [ShardSet]) to dst and
// returns the extended slice. It allocates nothing when dst has room for
// the set and k ≤ 16. shards < 1 returns dst unchanged.
func AppendShardSet(dst []int, tenant, lane string, shards, k int) []int {
	if shards < 1 {
		return dst
	}
	k = min(max(k, 1), shards)
	seed := hashSeed(tenant, lane)

	// Keep the k best (score, shard) pairs sorted by descending score with
	// insertion: most shards lose against the current k-th best after one
	// comparison, so this is O(N) in practice and O(N·k) at worst.
	var inline [inlineK]uint64
	scores := inline[:0]
	if k > inlineK {
		scores = make([]uint64, 0, k)
	}
	base := len(dst)
	for s := range shards {
		sc := score(seed, s)
		pos := len(scores)
		// Strictly less: on an exact tie the lower shard index stays ahead.
		for pos > 0 && scores[pos-1] < sc {
			pos--
		}
		if pos >= k {
			continue
		}
		if len(scores) < k {
			scores = append(scores, 0)
			dst = append(dst, 0)
		}
		set := dst[base:]
		copy(scores[pos+1:], scores[pos:len(scores)-1])
		copy(set[pos+1:], set[pos:len(set)-1])
		scores[pos], set[pos] = sc, s
	}
	return dst
}

// Pick returns the shard a job from tenant goes to in lane: the least deep
// of the tenant's shard set (see [ShardSet]), where depth reports a shard's
// depth. On equal depths the earlier choice in ShardSet order wins, so when
// all depths are equal Pick returns ShardSet(...)[0]. depth is called once
// for each of the min(k, shards) shards, in ShardSet order, and must not be
// nil.
//
// Pick allocates nothing for k ≤ 16. It panics if shards < 1: there is no
// shard to return, and the topology rejects such lanes at startup.
func Pick(tenant, lane string, shards, k int, depth func(shard int) int64) int {
	if shards < 1 {
		panic("router: Pick with shards < 1")
	}
	var buf [inlineK]int
	set := AppendShardSet(buf[:0], tenant, lane, shards, k)
	best, bestDepth := set[0], depth(set[0])
	for _, s := range set[1:] {
		if d := depth(s); d < bestDepth {
			best, bestDepth = s, d
		}
	}
	return best
}

// The placement contract (see the package comment). Changing any of this
// moves tenants between shards; the golden tests exist to catch it.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
	// golden64 is 2⁶⁴/φ, the splitmix64 increment.
	golden64 = 0x9e3779b97f4a7c15
)

// hashSeed is splitmix64Mix(FNV-1a-64(uvarint(len(lane)) ‖ lane ‖ tenant)).
func hashSeed(tenant, lane string) uint64 {
	h := uint64(fnvOffset64)
	n := uint64(len(lane))
	for n >= 0x80 {
		h = (h ^ (n&0x7f | 0x80)) * fnvPrime64
		n >>= 7
	}
	h = (h ^ n) * fnvPrime64
	for i := range len(lane) {
		h = (h ^ uint64(lane[i])) * fnvPrime64
	}
	for i := range len(tenant) {
		h = (h ^ uint64(tenant[i])) * fnvPrime64
	}
	// FNV-1a spreads a change in the last bytes over few output bits; one
	// finalizer round makes the seed uniform before it is stepped per shard.
	return splitmix64Mix(h)
}

// score is shard s's rendezvous score: the (s+1)-th output of the
// splitmix64 generator started at seed.
func score(seed uint64, s int) uint64 {
	return splitmix64Mix(seed + uint64(s+1)*golden64)
}

// splitmix64Mix is the splitmix64 output finalizer: a bijection whose every
// output bit depends on every input bit.
func splitmix64Mix(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
