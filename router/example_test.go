package router_test

import (
	"fmt"

	"github.com/sluice-dev/sluice/router"
)

func ExampleShardSet() {
	// Tenant acme's 2 of the standard lane's 16 shards, first choice first.
	fmt.Println(router.ShardSet("acme", "standard", 16, 2))
	// Another lane hashes independently.
	fmt.Println(router.ShardSet("acme", "premium", 16, 2))
	// Output:
	// [9 12]
	// [11 2]
}

func ExampleAppendShardSet() {
	buf := make([]int, 0, 3) // reused across calls: no allocation
	for _, tenant := range []string{"acme", "globex"} {
		buf = router.AppendShardSet(buf[:0], tenant, "standard", 100, 3)
		fmt.Println(tenant, buf)
	}
	// Output:
	// acme [54 87 9]
	// globex [6 98 5]
}

func ExamplePick() {
	// A depth view, as a cache of queue depths would supply it.
	depths := map[int]int64{9: 40, 12: 3}
	depth := func(shard int) int64 { return depths[shard] }

	// acme's shards are 9 and 12; 12 is less deep.
	fmt.Println(router.Pick("acme", "standard", 16, 2, depth))

	// On equal depths the first choice wins.
	depths[12] = 40
	fmt.Println(router.Pick("acme", "standard", 16, 2, depth))
	// Output:
	// 12
	// 9
}
