// Package router places a tenant's jobs on a lane's shard queues. It is pure
// and deterministic: no I/O, no clocks, no global state. The same (tenant,
// lane, shards, k) always gives the same answer, in every process and every
// release.
//
// # Shuffle sharding
//
// Each lane has N shard queues. Instead of giving every tenant every shard
// (one noisy tenant then slows everyone) or one shard each (a noisy tenant
// then slows everyone who shares it), each tenant is assigned a shard set of
// k of the N shards. A noisy tenant can fill only its own k shards, and
// another tenant is hurt only if it shares all k of them: with N=16, k=2
// there are 120 possible sets, so two tenants have the same set with
// probability 1/120; with N=100, k=3 it is 1/161,700. A quiet tenant that
// shares some but not all shards with the noisy one still has a clear shard
// to go to, and [Pick] sends each job to the least deep of the tenant's k
// shards, so it goes there.
//
// # Top-k rendezvous hashing
//
// The shard set is chosen with rendezvous (highest random weight) hashing:
// every shard gets a pseudo-random score for the (lane, tenant) pair and the
// tenant's set is the k highest-scoring shards, best first ([ShardSet]).
// Compared with "hash mod N" or picking k shards from a seeded shuffle:
//
//   - A shard's score depends only on (lane, tenant, shard), never on N, so
//     growing a lane from N to N+1 shards only moves tenants onto the new
//     shard: a tenant's new set is its old set, or the new shard inserted at
//     its rank with the old last choice dropped; about k/(N+1) of tenants
//     move, and nothing moves between old shards. Shrinking is the reverse.
//   - The order of the set is meaningful: index 0 is the tenant's first
//     choice, used when depths tie, so an idle lane keeps each tenant on one
//     shard and preserves its submission order as far as possible.
//   - Every k-subset of shards is equally likely, which is what makes the
//     1/C(N,k) overlap bound hold.
//
// The cost is O(N) hashing per call (about 1–2 ns per shard), which is
// negligible for the lane sizes the topology allows (N ≤ 1000), and
// [AppendShardSet] and [Pick] allocate nothing for k ≤ 16.
//
// # Hash contract
//
// Placement is part of the system's on-disk and operational state (queues
// hold jobs placed by it, dashboards show per-shard tenants), so the hash is
// fixed and must never change between releases:
//
//	seed      = splitmix64mix(FNV-1a-64(uvarint(len(lane)) ‖ lane ‖ tenant))
//	score(s)  = splitmix64mix(seed + (s+1)·0x9e3779b97f4a7c15)
//
// FNV-1a-64 is the standard 64-bit FNV-1a (offset 14695981039346656037,
// prime 1099511628211); the length prefix makes the (lane, tenant) encoding
// unambiguous; splitmix64mix is the splitmix64 output finalizer (Steele,
// Lea, Flood 2014), so score(0), score(1), … is exactly the splitmix64
// stream seeded with seed. Equal scores (a 2⁻⁶⁴ event) rank the lower shard
// index first. hash/maphash is not used: it is randomly seeded per process.
// Golden values in the tests pin all of this.
package router
