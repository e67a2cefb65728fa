package router

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"testing"
)

// TestHashContract pins the hash to its published definitions, so the
// package comment's contract is checked, not just asserted: the seed is
// standard FNV-1a 64 (as hash/fnv computes it) over the length-prefixed
// encoding, finalized by splitmix64, and the per-shard scores are exactly
// the splitmix64 stream.
func TestHashContract(t *testing.T) {
	t.Parallel()

	t.Run("Splitmix64Stream", func(t *testing.T) {
		t.Parallel()
		// The first outputs of splitmix64 seeded with 0, as published with
		// the reference implementation (Vigna, prng.di.unimi.it).
		want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
		for s, w := range want {
			if got := score(0, s); got != w {
				t.Errorf("score(0, %d) = %#016x, want %#016x", s, got, w)
			}
		}
	})

	t.Run("SeedIsFNV1aOfEncoding", func(t *testing.T) {
		t.Parallel()
		long := string(make([]byte, 300)) // a two-byte uvarint length
		for _, tt := range []struct{ tenant, lane string }{
			{"", ""},
			{"acme", "standard"},
			{"ünïcødé/テナント", "free"},
			{"x", long},
			{"\xff\x00", "\x00\xff"},
		} {
			h := fnv.New64a()
			h.Write(binary.AppendUvarint(nil, uint64(len(tt.lane))))
			h.Write([]byte(tt.lane))
			h.Write([]byte(tt.tenant))
			if got, want := hashSeed(tt.tenant, tt.lane), splitmix64Mix(h.Sum64()); got != want {
				t.Errorf("hashSeed(%q, %q) = %#016x, want %#016x", tt.tenant, tt.lane, got, want)
			}
		}
	})

	t.Run("EncodingIsUnambiguous", func(t *testing.T) {
		t.Parallel()
		// Without the length prefix these pairs would hash the same bytes.
		if hashSeed("bc", "a") == hashSeed("c", "ab") {
			t.Error(`("bc", "a") and ("c", "ab") have the same seed`)
		}
		if hashSeed("", "ab") == hashSeed("ab", "") {
			t.Error(`("", "ab") and ("ab", "") have the same seed`)
		}
	})

	t.Run("Golden", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			tenant, lane string
			seed         uint64
			score0       uint64
			score1       uint64
		}{
			{"acme", "standard", 0x3c81b8f9e2e32dff, 0xd584632d9740a572, 0x4efb392e4eb7f262},
			{"", "", 0x25fc6dd36ce04b20, 0xd0348e5fac8d4093, 0x9e5215eb491786fa},
			{"tenant-42", "premium", 0x287d825010b7adc0, 0xfd7cb6a3a29b4260, 0xf429ea42b8957710},
		} {
			seed := hashSeed(tt.tenant, tt.lane)
			if seed != tt.seed {
				t.Errorf("hashSeed(%q, %q) = %#016x, want %#016x", tt.tenant, tt.lane, seed, tt.seed)
			}
			if got := score(seed, 0); got != tt.score0 {
				t.Errorf("%q %q: score 0 = %#016x, want %#016x", tt.tenant, tt.lane, got, tt.score0)
			}
			if got := score(seed, 1); got != tt.score1 {
				t.Errorf("%q %q: score 1 = %#016x, want %#016x", tt.tenant, tt.lane, got, tt.score1)
			}
		}
	})
}

// TestShardSetGolden pins placements. If it fails, the hash or the ranking
// changed, which would move live tenants between shards: restore it rather
// than update the table.
func TestShardSetGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tenant, lane string
		shards, k    int
		want         []int
	}{
		{"acme", "standard", 16, 2, []int{9, 12}},
		{"acme", "standard", 100, 3, []int{54, 87, 9}},
		{"acme", "premium", 16, 2, []int{11, 2}},
		{"acme", "standard", 8, 8, []int{0, 6, 3, 5, 7, 1, 2, 4}},
		{"acme", "standard", 1000, 5, []int{438, 575, 835, 476, 983}},
		{"acme", "standard", 1, 3, []int{0}},
		{"acme", "standard", 16, 0, []int{9}},
		{"globex", "standard", 16, 2, []int{6, 5}},
		{"globex", "standard", 100, 3, []int{6, 98, 5}},
		{"globex", "premium", 16, 2, []int{2, 1}},
		{"globex", "standard", 8, 8, []int{6, 5, 0, 3, 1, 7, 2, 4}},
		{"initech", "standard", 16, 2, []int{7, 13}},
		{"initech", "standard", 100, 3, []int{69, 77, 96}},
		{"initech", "premium", 16, 2, []int{1, 10}},
		{"initech", "standard", 8, 8, []int{7, 6, 3, 1, 0, 4, 2, 5}},
		{"", "standard", 16, 2, []int{0, 5}},
		{"", "standard", 100, 3, []int{58, 29, 89}},
		{"ünïcødé/テナント", "free", 16, 2, []int{14, 15}},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%q/%s/N=%d,k=%d", tt.tenant, tt.lane, tt.shards, tt.k)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := ShardSet(tt.tenant, tt.lane, tt.shards, tt.k); !slices.Equal(got, tt.want) {
				t.Errorf("ShardSet = %v, want %v", got, tt.want)
			}
		})
	}
}

// checkSet fails t unless set is a valid shard set: length min(max(k,1),
// shards), distinct, in range.
func checkSet(t testing.TB, set []int, shards, k int) {
	t.Helper()
	if want := min(max(k, 1), shards); len(set) != want {
		t.Fatalf("len(set) = %d, want %d (shards %d, k %d): %v", len(set), want, shards, k, set)
	}
	seen := make(map[int]bool, len(set))
	for _, s := range set {
		if s < 0 || s >= shards {
			t.Fatalf("shard %d out of range [0, %d): %v", s, shards, set)
		}
		if seen[s] {
			t.Fatalf("shard %d repeated: %v", s, set)
		}
		seen[s] = true
	}
}

func TestShardSetInvariants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		shards, k int
		wantLen   int
	}{
		{"OneShard", 1, 1, 1},
		{"OneShardKTooBig", 1, 5, 1},
		{"KZeroClampsToOne", 16, 0, 1},
		{"KNegativeClampsToOne", 16, -3, 1},
		{"KOne", 16, 1, 1},
		{"N16K2", 16, 2, 2},
		{"N100K3", 100, 3, 3},
		{"KEqualsN", 16, 16, 16},
		{"KAboveNClampsToN", 16, 40, 16},
		{"KAboveInline", 40, 20, 20},
		{"N1000K5", 1000, 5, 5},
		{"N1000KAll", 1000, 1000, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for i := range 200 {
				tenant := fmt.Sprintf("tenant-%d", i)
				set := ShardSet(tenant, "standard", tt.shards, tt.k)
				if len(set) != tt.wantLen {
					t.Fatalf("%s: len = %d, want %d", tenant, len(set), tt.wantLen)
				}
				checkSet(t, set, tt.shards, tt.k)
				if again := ShardSet(tenant, "standard", tt.shards, tt.k); !slices.Equal(set, again) {
					t.Fatalf("%s: not deterministic: %v then %v", tenant, set, again)
				}
				prefix := []int{-7, -8}
				got := AppendShardSet(prefix, tenant, "standard", tt.shards, tt.k)
				if !slices.Equal(got[:2], []int{-7, -8}) || !slices.Equal(got[2:], set) {
					t.Fatalf("%s: AppendShardSet(%v) = %v, want the prefix then %v", tenant, prefix, got, set)
				}
				if tt.wantLen == tt.shards {
					sorted := slices.Sorted(slices.Values(set))
					for i, s := range sorted {
						if s != i {
							t.Fatalf("%s: k == shards is not a permutation: %v", tenant, set)
						}
					}
				}
			}
		})
	}
}

// TestShardSetPrefix: a tenant's k-set is the first k of its (k+1)-set,
// since both are the same ranking cut at different depths. Raising k for a
// lane therefore adds a choice without reordering existing ones.
func TestShardSetPrefix(t *testing.T) {
	t.Parallel()
	for i := range 500 {
		tenant := fmt.Sprintf("tenant-%d", i)
		all := ShardSet(tenant, "standard", 24, 24)
		for k := 1; k <= 24; k++ {
			if got := ShardSet(tenant, "standard", 24, k); !slices.Equal(got, all[:k]) {
				t.Fatalf("%s: k=%d gives %v, want prefix %v", tenant, k, got, all[:k])
			}
		}
	}
}

func TestNoShards(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{0, -1, math.MinInt} {
		if got := ShardSet("acme", "standard", shards, 2); got != nil {
			t.Errorf("ShardSet(shards %d) = %v, want nil", shards, got)
		}
		dst := []int{1, 2}
		if got := AppendShardSet(dst, "acme", "standard", shards, 2); !slices.Equal(got, dst) {
			t.Errorf("AppendShardSet(shards %d) = %v, want dst unchanged", shards, got)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Pick(shards %d) did not panic", shards)
				}
			}()
			Pick("acme", "standard", shards, 2, func(int) int64 { return 0 })
		}()
	}
}

// TestGrowShards checks the rendezvous property the package relies on:
// adding shard N to a lane of N shards moves a tenant only onto the new
// shard. The new set, without shard N, is a prefix of the old set in the
// same order, and about k/(N+1) of tenants move.
func TestGrowShards(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ shards, k int }{{16, 2}, {100, 3}, {4, 2}, {8, 8}} {
		t.Run(fmt.Sprintf("N=%d,k=%d", tt.shards, tt.k), func(t *testing.T) {
			t.Parallel()
			const tenants = 20_000
			moved := 0
			for i := range tenants {
				tenant := fmt.Sprintf("tenant-%d", i)
				before := ShardSet(tenant, "standard", tt.shards, tt.k)
				after := ShardSet(tenant, "standard", tt.shards+1, tt.k)
				kept := slices.DeleteFunc(slices.Clone(after), func(s int) bool { return s == tt.shards })
				if len(kept) < len(after) {
					moved++
				}
				if !slices.Equal(kept, before[:len(kept)]) {
					t.Fatalf("%s: %d→%d shards moved %v to %v, not just onto the new shard", tenant, tt.shards, tt.shards+1, before, after)
				}
			}
			// Each tenant moves with probability min(k, N+1)/(N+1): the
			// new shard ranks among its top k. Binomial sd is at most
			// sqrt(20000/4) ≈ 71, i.e. ≤ 0.36 % of tenants; allow 2 %.
			p := float64(min(tt.k, tt.shards+1)) / float64(tt.shards+1)
			if got := float64(moved) / tenants; math.Abs(got-p) > 0.02 {
				t.Errorf("%.4f of tenants moved, want about %.4f", got, p)
			}
		})
	}
}

// TestSpread checks that the hash spreads tenants evenly: over 100,000
// tenants every shard is a member of about k/N of the shard sets and the
// first choice of about 1/N.
//
// A shard's count is Binomial(100000, p), so its sd is sqrt(100000·p·(1-p)).
// The tolerance for each row is at least 5.5 sd, so a correct hash fails a
// row by chance with probability under N·4e-8 (≤ 4e-6), while a skewed
// hash (one shard 10 % over) fails. Measured with this tenant set: largest
// deviation 2.2 % / 4.3 % (N=16 member / first), 4.3 % / 6.8 % (N=100).
// For N=100 first choices ±10 % is only 3.2 sd (one shard of 100 would
// exceed it by chance about 14 % of the time), so that row allows ±20 %.
//
// The chi-square statistic of each row must also stay below df + 6·√(2·df)
// (an upper tail near 1e-4 for these df); with this tenant set it is 24.9,
// 34.5, 82.6, 90.5. The membership counts are not multinomial (a set holds
// k distinct shards), which only makes their statistic smaller.
func TestSpread(t *testing.T) {
	t.Parallel()
	const tenants = 100_000
	tests := []struct {
		shards, k int
		memberTol float64 // relative
		firstTol  float64 // relative
	}{
		// sd/mean: member 0.84 %, first 1.22 %.
		{shards: 16, k: 2, memberTol: 0.10, firstTol: 0.10},
		// sd/mean: member 1.80 %, first 3.15 %.
		{shards: 100, k: 3, memberTol: 0.10, firstTol: 0.20},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("N=%d,k=%d", tt.shards, tt.k), func(t *testing.T) {
			t.Parallel()
			member := make([]int, tt.shards)
			first := make([]int, tt.shards)
			buf := make([]int, 0, tt.k)
			for i := range tenants {
				set := AppendShardSet(buf[:0], fmt.Sprintf("tenant-%d", i), "standard", tt.shards, tt.k)
				for _, s := range set {
					member[s]++
				}
				first[set[0]]++
			}
			check := func(what string, counts []int, p, tol float64) {
				mean := tenants * p
				sd := math.Sqrt(tenants * p * (1 - p))
				if tol*mean < 5.5*sd {
					t.Fatalf("%s: tolerance %.0f%% is only %.1f sd; widen it", what, 100*tol, tol*mean/sd)
				}
				var worst, chi2 float64
				for s, c := range counts {
					d := float64(c) - mean
					worst = max(worst, math.Abs(d)/mean)
					chi2 += d * d / mean
					if math.Abs(d) > tol*mean {
						t.Errorf("%s: shard %d has %d, want %.0f ± %.0f%%", what, s, c, mean, 100*tol)
					}
				}
				df := float64(tt.shards - 1)
				if limit := df + 6*math.Sqrt(2*df); chi2 > limit {
					t.Errorf("%s: chi-square %.1f above %.1f (df %.0f)", what, chi2, limit, df)
				}
				t.Logf("%s: mean %.0f, worst deviation %.2f%%, chi-square %.1f (df %.0f)", what, mean, 100*worst, chi2, df)
			}
			check("member", member, float64(tt.k)/float64(tt.shards), tt.memberTol)
			check("first choice", first, 1/float64(tt.shards), tt.firstTol)
		})
	}
}

// TestOverlap measures how often two tenants share shards. Every pair of
// the 100,000 tenants is counted (grouping tenants by their set), so the
// estimate is precise: the fraction sharing all k shards should be
// 1/C(N,k) (1/120 and 1/161,700); measured 1/120.0 and 1/160,708. The
// bound is a loose ±15 %, since at N=100 only about 31,000 of the 5·10⁹
// pairs collide and tenants in one group are counted together.
func TestOverlap(t *testing.T) {
	t.Parallel()
	const tenants = 100_000
	for _, tt := range []struct {
		shards, k int
		combos    float64 // C(N, k)
	}{
		{16, 2, 120},
		{100, 3, 161_700},
	} {
		t.Run(fmt.Sprintf("N=%d,k=%d", tt.shards, tt.k), func(t *testing.T) {
			t.Parallel()
			groups := map[string]int{}
			for i := range tenants {
				set := ShardSet(fmt.Sprintf("tenant-%d", i), "standard", tt.shards, tt.k)
				slices.Sort(set)
				groups[fmt.Sprint(set)]++
			}
			var sharing float64
			for _, n := range groups {
				sharing += float64(n) * float64(n-1) / 2
			}
			got := sharing / (tenants * (tenants - 1) / 2)
			want := 1 / tt.combos
			t.Logf("%d distinct sets; pairs sharing all %d shards: %.3g = 1/%.0f, want 1/%.0f", len(groups), tt.k, got, 1/got, tt.combos)
			if math.Abs(got-want) > 0.15*want {
				t.Errorf("pairs sharing all shards: %.3g, want %.3g ± 15%%", got, want)
			}
		})
	}

	t.Run("N=16,k=2,ShareAny", func(t *testing.T) {
		t.Parallel()
		// Two tenants share at least one shard with probability
		// 1 - C(14,2)/C(16,2) = 29/120 ≈ 0.242. 50,000 disjoint pairs:
		// sd ≈ 0.0019, bound 0.02 (≈ 10 sd).
		const pairs = 50_000
		share := 0
		for i := range pairs {
			a := ShardSet(fmt.Sprintf("tenant-%d", 2*i), "standard", 16, 2)
			b := ShardSet(fmt.Sprintf("tenant-%d", 2*i+1), "standard", 16, 2)
			if slices.Contains(b, a[0]) || slices.Contains(b, a[1]) {
				share++
			}
		}
		got, want := float64(share)/pairs, 29.0/120
		if math.Abs(got-want) > 0.02 {
			t.Errorf("pairs sharing a shard: %.4f, want %.4f", got, want)
		}
	})
}

// TestLanesIndependent: a tenant's sets in two lanes are unrelated, so the
// same tenant gets the same unordered set in two lanes with probability
// 1/C(N,k) and the same first choice with probability 1/N.
func TestLanesIndependent(t *testing.T) {
	t.Parallel()
	const tenants = 10_000
	sameSet, sameFirst := 0, 0
	for i := range tenants {
		tenant := fmt.Sprintf("tenant-%d", i)
		a := ShardSet(tenant, "premium", 16, 2)
		b := ShardSet(tenant, "standard", 16, 2)
		if a[0] == b[0] {
			sameFirst++
		}
		slices.Sort(a)
		slices.Sort(b)
		if slices.Equal(a, b) {
			sameSet++
		}
	}
	// Expected: 83 same sets (sd 9), 625 same first choices (sd 24).
	if sameSet > 150 {
		t.Errorf("%d of %d tenants have the same set in both lanes, want about %d", sameSet, tenants, tenants/120)
	}
	if sameFirst < 500 || sameFirst > 750 {
		t.Errorf("%d of %d tenants have the same first choice in both lanes, want about %d", sameFirst, tenants, tenants/16)
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	// Depths are given by position in the tenant's shard set, so the table
	// does not depend on which shards the hash picks.
	tests := []struct {
		name      string
		shards, k int
		depths    []int64 // depth of set[i]
		wantPos   int     // want set[wantPos]
	}{
		{"FirstIsLeast", 16, 2, []int64{1, 5}, 0},
		{"SecondIsLeast", 16, 2, []int64{5, 1}, 1},
		{"TieKeepsFirst", 16, 2, []int64{3, 3}, 0},
		{"AllZero", 16, 2, []int64{0, 0}, 0},
		{"ThirdIsLeast", 100, 3, []int64{9, 8, 7}, 2},
		{"TieAfterFirstKeepsEarlier", 100, 3, []int64{9, 4, 4}, 1},
		{"TieWithFirstKeepsFirst", 100, 3, []int64{4, 9, 4}, 0},
		{"Negative", 100, 3, []int64{0, -1, 5}, 1},
		{"Huge", 16, 2, []int64{math.MaxInt64, math.MaxInt64 - 1}, 1},
		{"MinInt", 16, 2, []int64{math.MinInt64, math.MinInt64}, 0},
		{"KOne", 16, 1, []int64{100}, 0},
		{"KZeroIsOne", 16, 0, []int64{100}, 0},
		{"OneShard", 1, 3, []int64{7}, 0},
		{"AllShardsLastLeast", 4, 4, []int64{4, 3, 2, 1}, 3},
		{"KAboveInline", 40, 20, append(slices.Repeat([]int64{10}, 19), 1), 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for i := range 50 {
				tenant := fmt.Sprintf("tenant-%d", i)
				set := ShardSet(tenant, "standard", tt.shards, tt.k)
				if len(set) != len(tt.depths) {
					t.Fatalf("bad test: set %v, depths %v", set, tt.depths)
				}
				depthOf := make(map[int]int64, len(set))
				for i, s := range set {
					depthOf[s] = tt.depths[i]
				}
				var calls []int
				got := Pick(tenant, "standard", tt.shards, tt.k, func(s int) int64 {
					calls = append(calls, s)
					d, ok := depthOf[s]
					if !ok {
						t.Fatalf("depth asked for shard %d, not in set %v", s, set)
					}
					return d
				})
				if want := set[tt.wantPos]; got != want {
					t.Fatalf("%s: Pick = %d, want %d (set %v, depths %v)", tenant, got, want, set, tt.depths)
				}
				if !slices.Equal(calls, set) {
					t.Fatalf("%s: depth called for %v, want once per shard in set order %v", tenant, calls, set)
				}
			}
		})
	}
}

// TestPickEqualDepths: with equal depths (an idle lane, or a depth cache
// that has not filled yet) every tenant stays on its first choice.
func TestPickEqualDepths(t *testing.T) {
	t.Parallel()
	for _, depth := range []int64{0, 42} {
		for i := range 2_000 {
			tenant := fmt.Sprintf("tenant-%d", i)
			got := Pick(tenant, "standard", 100, 3, func(int) int64 { return depth })
			if want := ShardSet(tenant, "standard", 100, 3)[0]; got != want {
				t.Fatalf("%s: Pick = %d with all depths %d, want first choice %d", tenant, got, depth, want)
			}
		}
	}
}

// TestPickSpreadsLoad: with a real depth view the least-depth rule keeps
// a tenant's k shards level. One tenant submitting 1,000 jobs to an
// otherwise empty lane fills its two shards to within one job of each
// other and touches no other shard.
func TestPickSpreadsLoad(t *testing.T) {
	t.Parallel()
	depths := make([]int64, 16)
	for range 1000 {
		s := Pick("noisy", "standard", 16, 2, func(s int) int64 { return depths[s] })
		depths[s]++
	}
	set := ShardSet("noisy", "standard", 16, 2)
	a, b := depths[set[0]], depths[set[1]]
	if a+b != 1000 || a-b < 0 || a-b > 1 {
		t.Errorf("noisy's shards %v hold %d and %d jobs, want 500 each (first choice may lead by one): %v", set, a, b, depths)
	}
}

func TestAllocations(t *testing.T) {
	// Not parallel: AllocsPerRun is disturbed by concurrent allocation.
	depth := func(s int) int64 { return int64(s % 3) }
	for _, tt := range []struct{ shards, k int }{{16, 2}, {100, 3}, {1000, 16}} {
		buf := make([]int, 0, tt.k)
		if n := testing.AllocsPerRun(100, func() {
			buf = AppendShardSet(buf[:0], "tenant-1", "standard", tt.shards, tt.k)
		}); n != 0 {
			t.Errorf("AppendShardSet N=%d,k=%d: %.0f allocations, want 0", tt.shards, tt.k, n)
		}
		if n := testing.AllocsPerRun(100, func() {
			Pick("tenant-1", "standard", tt.shards, tt.k, depth)
		}); n != 0 {
			t.Errorf("Pick N=%d,k=%d: %.0f allocations, want 0", tt.shards, tt.k, n)
		}
		if n := testing.AllocsPerRun(100, func() {
			ShardSet("tenant-1", "standard", tt.shards, tt.k)
		}); n > 1 {
			// The result, unless the compiler proves it does not escape.
			t.Errorf("ShardSet N=%d,k=%d: %.0f allocations, want at most 1 (the result)", tt.shards, tt.k, n)
		}
	}
}
