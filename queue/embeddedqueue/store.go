package embeddedqueue

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

// On-disk layout, format 3:
//
//	meta                  "format" → "3"
//	                      "crc-from/<queue>" → seq (8): the queue's first checksummed record
//	queues                name → JSON storedSpec
//	m/<queue>             seq (8 bytes, big-endian) → message ID (16 bytes) ‖ body ‖ CRC-32C (4); written once
//	s/<queue>             seq → visibleAt (8) ‖ sentAt (8) ‖ receives (4) ‖ gen (4)
//	keys, keys-expiry     idempotency keys (keys.go)
//	corrupt               queue ‖ 0 ‖ seq (8) → a message record that failed its checksum, as read
//
// The m/ bucket's own sequence holds the highest sequence number used, so
// numbers are never reused, even after the newest messages were deleted.
// Sequence numbers grow, so both per-queue buckets are appended at the
// tail and are packed (fillPercent) instead of left half full.
//
// A message record ends with the CRC-32C (Castagnoli, as the redo log's)
// of its ID and body, big-endian: bbolt checks the structure of its pages
// but not the values in them, and a flipped byte in a body was delivered
// as it was. Records written by format 2 builds have no checksum, and
// the upgrade does not rewrite them (a store can hold millions): it
// stores, per queue, the next sequence number as "crc-from/<queue>", and
// records numbered below it are read as they were. Sequence numbers only
// grow, so every record written since is checksummed; a queue with no
// such key (made since the upgrade) is checksummed from its first. A
// record whose checksum fails is never delivered: the receive that finds
// it moves it to the corrupt bucket and goes on with the next (claim,
// quarantine).
var (
	metaBucket    = []byte("meta")
	queuesBucket  = []byte("queues")
	corruptBucket = []byte("corrupt")
	formatKey     = []byte("format")
)

// crcFromKey names queue q's first checksummed sequence number in the
// meta bucket.
func crcFromKey(q string) []byte { return []byte("crc-from/" + q) }

// The store's format, stamped in its meta bucket. A build reads its own
// format and upgrades the ones before it in place at Open (upgradable);
// it refuses any other, changing nothing. Format 1 was stamped by builds
// up to 2026-11-29 while its redo log and idempotency keys changed layout
// under the same stamp, so older builds read this build's stores wrongly
// (ignoring keys, losing a redo log's jobs): format 2 had the same layout
// as the last builds' format 1, stamped anew so that those builds refuse
// it.
// Format 3 adds the records' checksum; format 2 builds would read its
// last four bytes as part of the body, so it is stamped anew too.
const (
	format      = "3"
	fillPercent = 0.95
	// pageSize is the page size of a store this build creates; a store
	// keeps the size it was created with, whatever the build. With the
	// operating system's 4 KiB, the key record of a keyed SubmitBatch
	// (about 56 bytes a key: 5.6 KiB for 100 jobs) did not fit a page and
	// took a run of overflow pages at every commit, and a checkpoint,
	// which writes each page with a pwrite of its own, made four times
	// as many. With 16 KiB, in
	// BenchmarkProducer (256 senders, a key per job) the process used
	// 10.1-12.5 µs of CPU per job against 10.4-15.6 µs and sent
	// 92-109k jobs/s against 53-90k, four runs each alternated; receives
	// and deletes (BenchmarkEmbedded receive+delete) were no slower.
	pageSize = 16 << 10
	idLen    = 16
	crcLen   = 4
	stateLen = 24
)

// upgradable are the formats this build upgrades at Open: 1 and 2 have
// the same layout, records without a checksum.
var upgradable = []string{"2", "1"}

func msgBucket(q string) []byte   { return []byte("m/" + q) }
func stateBucket(q string) []byte { return []byte("s/" + q) }

// storedSpec is a queue's record in the queues bucket. It has its own
// field names so renaming a queue.QueueSpec field never breaks old files.
type storedSpec struct {
	ID                string        `json:"id"` // incarnation, hex
	Name              string        `json:"name"`
	VisibilityTimeout time.Duration `json:"visibility_timeout_ns"`
	Retention         time.Duration `json:"retention_ns"`
	DeadLetterQueue   string        `json:"dead_letter_queue,omitempty"`
	MaxReceiveCount   int           `json:"max_receive_count,omitempty"`
}

func encodeSpec(s queue.QueueSpec, id uint64) ([]byte, error) {
	return json.Marshal(storedSpec{
		ID:                fmt.Sprintf("%016x", id),
		Name:              s.Name,
		VisibilityTimeout: s.VisibilityTimeout,
		Retention:         s.Retention,
		DeadLetterQueue:   s.DeadLetterQueue,
		MaxReceiveCount:   s.MaxReceiveCount,
	})
}

func decodeSpec(v []byte) (queue.QueueSpec, uint64, error) {
	var s storedSpec
	if err := json.Unmarshal(v, &s); err != nil {
		return queue.QueueSpec{}, 0, err
	}
	raw, err := hex.DecodeString(s.ID)
	if err != nil || len(raw) != 8 {
		return queue.QueueSpec{}, 0, fmt.Errorf("bad queue id %q", s.ID)
	}
	return queue.QueueSpec{
		Name:              s.Name,
		VisibilityTimeout: s.VisibilityTimeout,
		Retention:         s.Retention,
		DeadLetterQueue:   s.DeadLetterQueue,
		MaxReceiveCount:   s.MaxReceiveCount,
	}, binary.BigEndian.Uint64(raw), nil
}

// putState writes m's state record into v, stateLen bytes long.
func putState(v []byte, m msgState) {
	binary.BigEndian.PutUint64(v[0:], uint64(m.visibleAt))
	binary.BigEndian.PutUint64(v[8:], uint64(m.sentAt))
	binary.BigEndian.PutUint32(v[16:], m.receives)
	binary.BigEndian.PutUint32(v[20:], m.gen)
}

func decodeState(v []byte) (msgState, error) {
	if len(v) != stateLen {
		return msgState{}, fmt.Errorf("state record of %d bytes, want %d", len(v), stateLen)
	}
	return msgState{
		visibleAt: int64(binary.BigEndian.Uint64(v[0:])),
		sentAt:    int64(binary.BigEndian.Uint64(v[8:])),
		receives:  binary.BigEndian.Uint32(v[16:]),
		gen:       binary.BigEndian.Uint32(v[20:]),
	}, nil
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

// newRecords builds the records of a send's bodies, but for those whose
// result failed already: each a fresh random message ID followed by the
// body and their checksum. The records share one array, and the IDs are drawn from
// crypto/rand in one read: an allocation and a read per message were
// about a tenth of a batched send's cost on the caller's goroutine
// (BenchmarkSendApply, prepare-ns/job). A record keeps the array alive
// only until the checkpoint that stores it: the writer holds records no
// longer, and readers copy them.
func newRecords(entries []queue.SendEntry, results []queue.SendResult) [][]byte {
	size := 0
	for i, e := range entries {
		if results[i].Err == nil {
			size += idLen + len(e.Body) + crcLen
		}
	}
	ids := make([]byte, idLen*len(entries)) // small: a send has at most queue.MaxBatch entries
	_, _ = rand.Read(ids)                   // never fails (crypto/rand aborts instead)
	slab := make([]byte, 0, size)
	recs := make([][]byte, len(entries))
	for i, e := range entries {
		if results[i].Err != nil {
			continue
		}
		start := len(slab)
		slab = append(append(slab, ids[i*idLen:(i+1)*idLen]...), e.Body...)
		slab = appendChecksum(slab, slab[start:])
		recs[i] = slab[start:len(slab):len(slab)]
	}
	return recs
}

// appendChecksum appends the checksum of data, a record's ID and body,
// to dst.
func appendChecksum(dst, data []byte) []byte {
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(data, castagnoli))
}

// errChecksum is the error of a record whose checksum does not match its
// ID and body.
var errChecksum = errors.New("checksum mismatch")

// recordBody returns the body of a message record: checksummed says it
// ends with a checksum (sequence number at or past its queue's crcFrom),
// which must match. An error means the record is damaged; its ID may be
// too.
func recordBody(rec []byte, checksummed bool) ([]byte, error) {
	if !checksummed {
		if len(rec) < idLen {
			return nil, fmt.Errorf("record of %d bytes, shorter than a message ID", len(rec))
		}
		return rec[idLen:], nil
	}
	if len(rec) < idLen+crcLen {
		return nil, fmt.Errorf("record of %d bytes, shorter than a message ID and checksum", len(rec))
	}
	n := len(rec) - crcLen
	if crc32.Checksum(rec[:n], castagnoli) != binary.BigEndian.Uint32(rec[n:]) {
		return nil, errChecksum
	}
	return rec[idLen:n], nil
}

// messageIDLen is the length of a message ID as messageID formats it.
const messageIDLen = 36

// messageID formats the ID in a record as a UUID (version 4 layout), the
// shape SQS message IDs have. It is kept when a message is redriven.
func messageID(rec []byte) string {
	var buf [messageIDLen]byte
	return string(appendMessageID(buf[:0], rec))
}

// appendMessageID appends the ID in rec, formatted as messageID does.
func appendMessageID(dst, rec []byte) []byte {
	var u [idLen]byte
	copy(u[:], rec[:idLen])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	dst = hex.AppendEncode(dst, u[0:4])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[4:6])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[6:8])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[8:10])
	dst = append(dst, '-')
	return hex.AppendEncode(dst, u[10:])
}

func newQueueID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// A receipt handle names one receive of one message: the queue's
// incarnation, the message's sequence number and its receive generation,
// base64url-encoded. Every receive bumps the generation, which fences off
// every earlier handle; the incarnation keeps a handle from one queue (or
// from a deleted and recreated store) from matching a message elsewhere.
type receipt struct {
	queueID uint64
	seq     uint64
	gen     uint32
}

const receiptLen = 20

func (r receipt) String() string {
	var b [receiptLen]byte
	binary.BigEndian.PutUint64(b[0:], r.queueID)
	binary.BigEndian.PutUint64(b[8:], r.seq)
	binary.BigEndian.PutUint32(b[16:], r.gen)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func parseReceipt(h string) (receipt, bool) {
	var b [receiptLen]byte
	if base64.RawURLEncoding.DecodedLen(len(h)) != receiptLen {
		return receipt{}, false
	}
	if n, err := base64.RawURLEncoding.Decode(b[:], []byte(h)); err != nil || n != receiptLen {
		return receipt{}, false
	}
	return receipt{
		queueID: binary.BigEndian.Uint64(b[0:]),
		seq:     binary.BigEndian.Uint64(b[8:]),
		gen:     binary.BigEndian.Uint32(b[16:]),
	}, true
}

// writeTx is the transaction of one commit group, with the group's clock
// reading. Its helpers keep disk and index in step and add every change
// to log, the group's redo log record; an empty log means nothing
// changed, so a group of empty receives writes nothing. While a
// checkpoint commits, tx is nil: the changes go only to the index and the
// log, and the writer applies them to the next transaction (writer.go).
type writeTx struct {
	tx     *bolt.Tx
	now    int64
	log    []byte
	opened []queueBuckets // buckets looked up so far in this group
	slab   []byte         // what keyAndState has not handed out yet
}

// keyAndState returns message seq's key and m's state record, cut from a
// slab shared by the group's messages: two allocations fewer per message.
// bbolt copies keys but keeps values until the commit, so no part of a
// slab is handed out twice.
func (w *writeTx) keyAndState(seq uint64, m msgState) (k, v []byte) {
	const n = 8 + stateLen
	if len(w.slab) < n {
		w.slab = make([]byte, 64*n)
	}
	b := w.slab[:n:n]
	w.slab = w.slab[n:]
	binary.BigEndian.PutUint64(b, seq)
	putState(b[8:], m)
	return b[:8:8], b[8:]
}

// put, del, setSequence and createBucket change the store and note the
// change.
func (w *writeTx) put(b *bolt.Bucket, name, k, v []byte) error {
	if w.tx != nil {
		if err := b.Put(k, v); err != nil {
			return err
		}
	}
	w.note(logPut, name, k, v)
	return nil
}

func (w *writeTx) del(b *bolt.Bucket, name, k []byte) error {
	if w.tx != nil {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	w.note(logDelete, name, k, nil)
	return nil
}

// delAt deletes k from the bucket c walks, as del does: through a cursor
// kept for the group, not the fresh one bbolt's Bucket.Delete makes, whose
// stack grows anew on every call. Growing those stacks was a fifth of all
// allocations in a pull-drain profile, at four lookups per job: the
// claim's read and state write, and the delete of the job's two records
// (bbolt's Put has no cursor form, so the state write still makes one).
func (w *writeTx) delAt(c *bolt.Cursor, name, k []byte) error {
	if w.tx != nil {
		if err := deleteAt(c, k); err != nil {
			return err
		}
	}
	w.note(logDelete, name, k, nil)
	return nil
}

// deleteAt deletes k, if present, from the bucket c walks: Bucket.Delete
// through a kept cursor (delAt, and the replay's applyChanges). Seek
// repositions from the root, so the cursor may have been used, and the
// bucket changed, since (bbolt's rule for reuse).
func deleteAt(c *bolt.Cursor, k []byte) error {
	if got, _ := c.Seek(k); !bytes.Equal(got, k) {
		return nil
	}
	return c.Delete()
}

func (w *writeTx) setSequence(b *bolt.Bucket, name []byte, seq uint64) error {
	if w.tx != nil {
		if err := b.SetSequence(seq); err != nil {
			return err
		}
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], seq)
	w.note(logSetSequence, name, nil, v[:])
	return nil
}

func (w *writeTx) createBucket(name []byte) error {
	if _, err := w.tx.CreateBucketIfNotExists(name); err != nil {
		return err
	}
	w.note(logCreateBucket, name, nil, nil)
	return nil
}

func (w *writeTx) note(kind byte, bucket, key, value []byte) {
	w.log = appendChange(w.log, kind, bucket, key, value)
}

// queueBuckets are a queue's two buckets and their names.
type queueBuckets struct {
	queue        string
	m, s         *bolt.Bucket
	mName, sName []byte
	// mc and sc walk m and s for the group's reads and deletes: cursors
	// kept for the group instead of one made per lookup (delAt).
	mc, sc *bolt.Cursor
	// seq is the highest sequence number added in this group, zero if
	// none: setSequences stores it once, not once per message.
	seq uint64
}

// buckets returns queue q's buckets, looked up once per group: a group
// touches few queues and many messages (a lookup per message was about a
// seventh of a batched send's cost in the writer). The pointer is valid
// until the next call.
func (w *writeTx) buckets(q string) (*queueBuckets, error) {
	for i := range w.opened {
		if w.opened[i].queue == q {
			return &w.opened[i], nil
		}
	}
	qb := queueBuckets{queue: q, mName: msgBucket(q), sName: stateBucket(q)}
	if w.tx != nil { // else checkpointing: the changes go to the log alone
		qb.m, qb.s = w.tx.Bucket(qb.mName), w.tx.Bucket(qb.sName)
		if qb.m == nil || qb.s == nil {
			return nil, fmt.Errorf("buckets of queue %s missing", q)
		}
		qb.m.FillPercent, qb.s.FillPercent = fillPercent, fillPercent
		qb.mc, qb.sc = qb.m.Cursor(), qb.s.Cursor()
	}
	w.opened = append(w.opened, qb)
	return &w.opened[len(w.opened)-1], nil
}

// setSequences stores, in each queue's message bucket, the highest
// sequence number the group added to it; the writer calls it after the
// group's operations, so the change is in the same record and commit as
// the messages.
func (w *writeTx) setSequences() error {
	for i := range w.opened {
		qb := &w.opened[i]
		if qb.seq == 0 {
			continue
		}
		if err := w.setSequence(qb.m, qb.mName, qb.seq); err != nil {
			return err
		}
		qb.seq = 0
	}
	return nil
}

// add stores a new message in q and indexes it.
func (w *writeTx) add(q *memQueue, rec []byte, m msgState) error {
	qb, err := w.buckets(q.spec.Name)
	if err != nil {
		return err
	}
	seq := q.nextSeq
	k, state := w.keyAndState(seq, m)
	if err := w.put(qb.m, qb.mName, k, rec); err != nil {
		return err
	}
	qb.seq = max(qb.seq, seq) // set by setSequences
	if err := w.put(qb.s, qb.sName, k, state); err != nil {
		return err
	}
	q.put(seq, m, w.now)
	q.recent.add(seq, rec)
	return nil
}

// update stores a message's new state and re-files it.
func (w *writeTx) update(q *memQueue, seq uint64, m msgState) (msgState, error) {
	qb, err := w.buckets(q.spec.Name)
	if err != nil {
		return msgState{}, err
	}
	k, state := w.keyAndState(seq, m)
	if err := w.put(qb.s, qb.sName, k, state); err != nil {
		return msgState{}, err
	}
	return q.put(seq, m, w.now), nil
}

// remove deletes a message from q.
func (w *writeTx) remove(q *memQueue, seq uint64) error {
	qb, err := w.buckets(q.spec.Name)
	if err != nil {
		return err
	}
	k := seqKey(seq)
	if err := w.delAt(qb.mc, qb.mName, k); err != nil {
		return err
	}
	if err := w.delAt(qb.sc, qb.sName, k); err != nil {
		return err
	}
	q.remove(seq)
	return nil
}

// errNeedsStore is returned by an operation that must read the store
// while a checkpoint commits, before it changes anything; the writer
// runs it again once the checkpoint has ended.
var errNeedsStore = errors.New("needs the store, which a checkpoint is writing")

// record returns a copy of message seq's record. While a checkpoint
// commits, only records held in memory can be read; others are
// errNeedsStore.
func (w *writeTx) record(q *memQueue, seq uint64) ([]byte, error) {
	if w.tx == nil {
		if rec, ok := q.record(seq); ok {
			return append([]byte(nil), rec...), nil
		}
		return nil, errNeedsStore
	}
	qb, err := w.buckets(q.spec.Name)
	if err != nil {
		return nil, err
	}
	k := seqKey(seq)
	got, v := qb.mc.Seek(k) // Bucket.Get, with the group's cursor (delAt)
	if !bytes.Equal(got, k) {
		return nil, fmt.Errorf("message %d of queue %s missing from the store", seq, q.spec.Name)
	}
	return append([]byte(nil), v...), nil
}

// quarantine moves message seq of q, whose record rec failed its
// checksum, out of q and into the corrupt bucket as it was read, keyed
// by queue and sequence number, for an operator to look at.
func (w *writeTx) quarantine(q *memQueue, seq uint64, rec []byte) error {
	var corrupt *bolt.Bucket
	if w.tx != nil { // else checkpointing: the change goes to the log alone
		corrupt = w.tx.Bucket(corruptBucket)
	}
	key := append(append([]byte(q.spec.Name), 0), seqKey(seq)...)
	if err := w.put(corrupt, corruptBucket, key, rec); err != nil {
		return err
	}
	return w.remove(q, seq)
}
