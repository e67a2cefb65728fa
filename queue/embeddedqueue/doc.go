// Package embeddedqueue is sluice's default, single-node queue backend: a
// queue.Backend stored in one bbolt file, durable before Send returns.
//
// # Why bbolt
//
// Measured on these machines (../shared/MEASURED.md, 1 KiB payloads,
// fsync'd): bbolt gives real multi-bucket transactions, so claiming a
// message, bumping its receive count and moving it to a dead-letter queue
// happen in one atomic step; it adds under 1 MB to the binary and builds in
// seconds. Pebble has no transactions (per-shard locks and tombstone-laden
// heads), adds 24 MB and ~40 modules; SQLite in WAL NORMAL mode does not
// fsync on commit and so is not durable against power loss. A single fsync
// costs about 0.75 ms here, which caps one-message-per-transaction stores
// near 1.3k jobs/s: what makes bbolt fast is group commit.
//
// # Group commit
//
// Every mutation (send, receive-claim, delete, visibility change, redrive,
// retention sweep) is an operation handed to one writer goroutine. The
// writer takes the first waiting operation and everything queued behind it
// (up to Options.MaxGroupCommit), applies them all in one transaction and
// answers each caller after the single fsync. There is no linger: the
// concurrency itself forms the groups, so a lone caller pays one fsync and
// 64 concurrent callers share a few. One operation's logical failure (a
// stale receipt, say) is reported to its caller and does not abort the
// group; only a storage error fails the whole group, after which the
// in-memory index is rebuilt from disk.
//
// # Layout and index
//
// Per queue, bucket "m/<queue>" maps a sequence number to the body (written
// once) and "s/<queue>" maps it to 24 bytes of state (visible-at, receive
// count, receipt generation, sent-at), so leases never rewrite bodies.
// Queue specs live in bucket "queues". At Open the state buckets are
// scanned into an in-memory index (about 50 bytes per message, no bodies):
// visible messages in a heap by sequence (send order), invisible ones
// (delayed or in flight) in a heap by visible-at, promoted lazily, so
// Receive costs O(log n).
//
// # Semantics
//
// Those of an SQS standard queue: visibility timeouts, per-message delay,
// receive counts, redrive to the dead-letter queue when a message that has
// been received MaxReceiveCount times would be received again (the moved
// copy keeps its original sent-at and starts at receive count zero), and
// retention. A receipt handle is seq.gen: every receive bumps gen, so a
// consumer whose lease was taken over can neither delete nor extend the
// message (queue.ErrReceiptInvalid). As on SQS, a receipt still deletes a
// message whose timeout has passed if nobody has received it since, but it
// can no longer change its visibility. The file is locked: one process per
// data directory.
//
// # Figures
//
// go test -run '^$' -bench . -benchtime 3s ./queue/embeddedqueue/ — see
// the README's "Performance" section for the latest figures.
package embeddedqueue
