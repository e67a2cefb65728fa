// Package embeddedqueue is sluice's default, single-node queue.Backend: all
// queues in one bbolt file behind a redo log, every message synced to the
// log before Send returns by default, or once per interval when asked (see
// Durability modes).
//
// # Why bbolt
//
// Measured on these machines (2 cores, ext4, 1 KiB payloads, fsync'd;
// MEASURED.md "Embedded durable stores"):
//
//   - bbolt v1.5.0 has real multi-bucket transactions, so claiming a
//     message, bumping its receive count and generation, and moving it to
//     a dead-letter queue are one atomic step. It adds about 0.75 MB to the
//     binary and builds cold in about 15 s. Batched, it took 39–71k
//     messages/s.
//   - pebble v2 has no transactions (per-shard locks would be needed, and
//     tombstones at a queue's head slow naive scans), adds 24 MB and about
//     40 modules, and builds cold in about 110 s, for 25–40k messages/s.
//   - SQLite in WAL mode with synchronous=NORMAL does not fsync on commit,
//     so it is not durable against power loss; with FULL it took 40–49k
//     batched but claimed only 1.1–2.2k/s.
//
// An fsync costs about 0.75 ms here (1.2–1.4k/s), so any store that syncs
// each message alone stops near 1.3k jobs/s. Group commit is what makes
// this one fast.
//
// # Group commit
//
// Every mutation (send, the claim inside a receive, delete, change
// visibility, redrive, retention sweep, queue creation) is an operation
// handed to one writer goroutine. The writer takes the first waiting
// operation, drains whatever else is already queued behind it (up to
// Options.MaxGroupCommit operations or 32 MiB), applies them all to one
// open bbolt transaction, appends their changes to a redo log as one
// record and syncs it, and answers each caller after that single sync (a
// group of receives, deletes, visibility changes and moves alone is not
// synced: Durability modes). There is no linger delay: callers that
// arrive while a group is syncing form the next group, so a lone sender
// pays one sync and 64 concurrent callers share one (TestGroupCommit sees
// about 30 sends per sync). One operation's logical failure, say a stale
// receipt, is reported to its caller alone; only a storage error fails
// the whole group, after which the transaction and the in-memory index
// are rebuilt from the store and the log. A group that wrote nothing
// (receives that found nothing) appends nothing. CommitStats counts syncs
// and the operations they carried. SendMany (queue.MultiSender) is one
// operation however many queues and batches it carries, so the gateway
// stores all the jobs of one SubmitBatch call in one record.
// Move (queue.Mover) stores each message in its new queue and deletes
// its original in one operation: the drainer's spills, backlog moves,
// retries and dead-letters cost one write, and a crash cannot leave a
// moved job in both queues.
//
// # Redo log and checkpoints
//
// A bbolt commit syncs twice (its pages, then its meta page) and rewrites
// every page of the tree it touched; the log record is one sequential
// append with one fdatasync. Measured here in an open loop of 8,000
// sends/s, sends waited 4.8 ms at the median when each group was a bbolt
// commit, and 0.34 ms with the log. Every 50 ms (checkpointEvery), or at
// once past 1 MiB of log, the open transaction is committed to the store
// file: a checkpoint. It runs beside the writer, which goes on applying
// sends, deletes and visibility changes (they read only the index), and
// receives of messages sent since the checkpoint before (their bodies are
// still in memory); a receive that must read an older body from the
// store waits the few milliseconds until the checkpoint ends. Records go to two log files by epoch
// (queues.db.wal, queues.db.wal.1), so the records of the checkpoint
// under way and those written while it commits never share a file; Open
// replays both in order (wal.go, writer.go).
//
// The store does not write bbolt's list of free pages at each commit
// (bbolt's NoFreelistSync, as etcd runs it): a queue frees pages on every
// delete, and writing that list was much of each commit's cost. Open
// rebuilds it by scanning the file instead. Measured here with a 443 MB
// store of 220,000 1 KiB messages: Open took 154–164 ms against 125–142
// ms when the list was written, and loading it (320,000 sends, 100,000
// receives and deletes) took 14.5 s against 35.9 s.
//
// # Durability modes
//
// Options.SyncInterval zero (the default, gateway flag --fsync=always): a
// group's log record is fdatasynced before its callers are answered if it
// holds a send, a change of queues or a retention sweep, so an answered
// send survives a power loss. A group of receives, deletes, visibility
// changes and moves alone is answered once its record is written, with no
// sync (doLazy): it survives a crash of the process, and is synced with
// the next group that holds a send or by the next checkpoint (every
// 50 ms), whichever comes first. A power loss can undo those last changes,
// and only those: an undone receive or delete leaves its message to be
// received again, and an undone move leaves it where it was, so no
// message is lost and one may be delivered again (at least once, as SQS).
// Draining then costs no sync per batch: receiving and deleting went from
// one fdatasync each to none, and BenchmarkPullDrain from 17–20k to
// 44–92k jobs/s. The checkpoint syncs lazy records before the next epoch
// starts, since its records are synced as they are answered and a power
// loss that kept them but lost the lazy tail would end the replay at the
// gap (wal.go; TestUnsyncedTailIsSyncedBeforeTheNextEpoch). For the
// same reason a failed write or sync of the log commits the store before
// anything more is answered: the lazy records before it may never reach
// the disk (TestFailedSyncLeavesNoGapBehindLaterSends).
//
// Options.SyncInterval positive (--fsync=interval:<d>): a group's record
// is written to the log with no sync, then answered. The changes are
// then in the operating system and survive a crash of the process: Open
// replays the log. Every interval the log is fdatasynced (and at every
// checkpoint the store is), so a power loss loses at most the calls
// answered in the last interval (plus the sync under way). Checkpoints
// come every max(interval, 50 ms). Log records carry a CRC and their
// epoch, so a record torn by a power loss, or left from before the last
// checkpoint, ends the replay; so does a gap, where a power loss during a
// checkpoint kept the next epoch's records and lost the tail of the one
// the checkpoint was committing (wal.go).
//
// A full disk: if a checkpoint fails (bbolt cannot grow the file), the
// backend commits each group at once instead, and fails it with
// queue.ErrUnavailable while the commit keeps failing; the answered
// changes stay in the log until a commit or the next Open takes them,
// and the failure syncs the log first: in interval mode its last records
// may not be synced yet, and no interval sync would take them
// (TestFailedCheckpointSyncsTheLogItHeld).
// Until space comes back no group commits, receives and deletes
// included: the changes answered since the last checkpoint must go into
// the file first.
//
// # Layout and index
//
// Per queue, bucket "m/<queue>" maps a sequence number to the message ID,
// body and their CRC-32C, written once; "s/<queue>" maps it to 24 bytes of state
// (visible-at, sent-at, receive count, receipt generation), so leases never
// rewrite bodies. Both are filled to 95 % rather than bbolt's 50 %, since
// sequence numbers only grow. Queue specs live in bucket "queues". A
// store is made with 16 KiB pages (pageSize), not the system's 4 KiB:
// fewer page writes per checkpoint, and the key record of a keyed batch
// fits a page; a store made with other pages keeps them.
// Idempotency keys (queue.KeyStore) given with a send are stored in the
// send's transaction, in bucket "keys-expiry" ordered by expiry, so each
// commit appends them (keyed by the random keys themselves, they cost a
// page write each), one record for the keys of a send that expire
// together; the retention sweep deletes them from its head, and
// LookupKey reads an in-memory map of the unexpired keys that Open
// builds from it (keys.go).
//
// # Checksums
//
// bbolt checks the structure of its pages, not the values in them, so a
// byte of a body changed on disk was delivered as it was. Every message
// record ends with the CRC-32C (Castagnoli, the redo log's) of its ID and
// body, checked by every receive before the body is returned or redriven;
// the rest of sluice only ever moves bodies it received (queue.Mover,
// queue.Relocate, the admin API's DLQ reads and replays), so this is the
// one read. A record that fails is not delivered, and not redriven either:
// in the dead-letter queue it would take a checksum of its own and look
// good. The receive moves it, as read, to bucket "corrupt" (keyed by
// queue and sequence number), counts it (Backend.CorruptMessages), logs
// it at ERROR with its queue, sequence number and message ID (at most a
// line per ratelog.Every), and goes on with the messages behind it: to a
// caller the message was deleted, as the retention sweep deletes one.
// The check costs about 55 ns for a 1 KiB body (BenchmarkRecordBody, 19
// GB/s), against microseconds for the receive and delete around it.
//
// Stores of format 2 (and 1) hold records without a checksum, possibly
// millions of them: the upgrade at Open rewrites none. It stores, per
// queue, the next sequence number ("crc-from/<queue>" in the meta bucket)
// after the redo log is replayed, since the log's records were written by
// the older build too; records numbered below it are read as before,
// unchecked, and sequence numbers only grow, so every record written since
// carries one. A queue made later has no such key and is checked from its
// first record. A redrive of an old record into a dead-letter queue adds
// the checksum there. The stamp and the keys are one transaction, so a
// crash before it commits leaves format 2 to be upgraded again.
//
// Open scans only the state records and the unexpired keys into an
// in-memory index, about 77 bytes per message and no bodies
// (BenchmarkIndexMemory), plus each key with its value: per queue, the
// states by sequence number (seqTable: chunks of consecutive numbers,
// stragglers in a map), visible messages in a heap by sequence number (send
// order), invisible ones (delayed or in flight) in a heap by visible-at,
// promoted lazily when their time comes, and every message in a heap by
// sent-at for OldestAge and retention. Receive, Delete and
// ChangeVisibility cost O(log n); Stats reads counters and scans nothing.
//
// # Semantics
//
// Those of an SQS standard queue, with the limits in package queue:
// visibility timeouts (queue default, per-receive override), change
// visibility (zero releases at once), per-message delays, receive counts,
// long polls that wake on a send, a release, or a delay or timeout ending,
// and redrive: a message already received MaxReceiveCount times is moved
// to the dead-letter queue, in the same transaction, by the receive that
// would have returned it once more. As on SQS, the moved message keeps its
// message ID, body and first sent-at (so retention counts from the first
// send) and starts at receive count zero. The sweeper deletes messages
// older than their queue's retention every Options.SweepInterval.
//
// # Receipts and fencing
//
// A receipt handle encodes the queue's incarnation (random, made with the
// queue), the message's sequence number and its receive generation. Every
// receive bumps the generation, so once another consumer has received the
// message, the earlier holder can neither delete nor extend it: it gets
// queue.ErrReceiptInvalid and knows it lost its lease. Handles from
// another queue, or from a store deleted and created again, never match,
// and sequence numbers are not reused (but see a power loss below). The
// choice for an expired lease that nobody has taken over follows SQS:
// Delete still works, ChangeVisibility is refused (SQS's
// MessageNotInflight). Generations are stored, so leases and handles
// survive a restart, but not a power loss: it can undo the last receives
// and moves (Durability modes), and with them the generations and
// sequence numbers they took, which the next receives and sends take
// again. A handle from an undone receive then matches the message's next
// receive, and one from a receive of a message moved by an undone move
// can match another message, sent since to the move's queue: a Delete
// with it deletes that message. Handles must not be kept across a power
// loss (sluice keeps them in the memory of the process that received
// them).
//
// # Crash safety and locking
//
// A Send that returned is on disk in the redo log (in interval mode,
// written to it): the crash test SIGKILLs a process in the middle of concurrent sends, in
// each mode, and finds every acknowledged message after reopening. Messages in flight at a crash keep their stored
// visible-at and come back when it passes. bbolt locks the file, so one
// process owns a data directory; a second Open fails with ErrInUse after
// Options.LockTimeout (one second) instead of waiting forever. The file
// never shrinks: space freed by deleted messages is reused, not returned.
//
// # Figures
//
// go test -run '^$' -bench 'BenchmarkEmbedded/fsync=always' -benchtime 1s
// ./queue/embeddedqueue/, two runs alternating with the build before the
// redo log (a bbolt commit, two fsyncs, per group), on 2 cores and a disk
// shared with other engineers' work (load average about 1, 2026-11-25):
//
//	                                                redo log        commit per group
//	durable send, 1 KiB, 1 sender                  4,550–6,410      1,680–1,750 jobs/s
//	durable send, 1 KiB, 64 senders (group commit) 41,200–57,800    24,000–25,900
//	send in batches of 10, 1 sender                25,300–30,200    10,900–12,200
//	receive + delete in batches of 10, 1 consumer  17,400–27,300    8,420–8,590
//	receive + delete in batches of 10, 8 consumers 52,200–63,000    24,500–24,600
//
// Runs on these machines vary up to 3× from one hour to the next; the
// ratio within a run is the figure to trust.
package embeddedqueue
