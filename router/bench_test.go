package router

import (
	"fmt"
	"testing"
)

// sink keeps results alive so the compiler cannot drop the work.
var sink []int

var benchShapes = []struct{ shards, k int }{{16, 2}, {100, 3}}

// Sample result (go test -run '^$' -bench . ./router/), on a 2-vCPU VM;
// about 1.5 ns of each shard's cost is the hash itself:
//
//	cpu: Oxide Virtual Turin-like Processor
//	BenchmarkShardSet/N=16,k=2-2          12184130    88.73 ns/op   16 B/op   1 allocs/op
//	BenchmarkShardSet/N=100,k=3-2          3804609   299.2 ns/op    24 B/op   1 allocs/op
//	BenchmarkAppendShardSet/N=16,k=2-2    18056190    72.40 ns/op    0 B/op   0 allocs/op
//	BenchmarkAppendShardSet/N=100,k=3-2    4635006   259.3 ns/op     0 B/op   0 allocs/op
//	BenchmarkPick/N=16,k=2-2              16478961    71.89 ns/op    0 B/op   0 allocs/op
//	BenchmarkPick/N=100,k=3-2              4734348   248.5 ns/op     0 B/op   0 allocs/op
func BenchmarkShardSet(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(fmt.Sprintf("N=%d,k=%d", sh.shards, sh.k), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = ShardSet("tenant-12345", "standard", sh.shards, sh.k)
			}
		})
	}
}

func BenchmarkAppendShardSet(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(fmt.Sprintf("N=%d,k=%d", sh.shards, sh.k), func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]int, 0, sh.k)
			for b.Loop() {
				buf = AppendShardSet(buf[:0], "tenant-12345", "standard", sh.shards, sh.k)
			}
		})
	}
}

func BenchmarkPick(b *testing.B) {
	for _, sh := range benchShapes {
		b.Run(fmt.Sprintf("N=%d,k=%d", sh.shards, sh.k), func(b *testing.B) {
			b.ReportAllocs()
			depths := make([]int64, sh.shards)
			depth := func(s int) int64 { return depths[s] }
			for b.Loop() {
				Pick("tenant-12345", "standard", sh.shards, sh.k, depth)
			}
		})
	}
}
