package embeddedqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The redo log.
//
// The writer keeps one bbolt transaction open across groups. Each group's
// changes to it are appended, with one write, to the log file beside the
// store (<store>.wal) before the group's callers are answered. In the
// default mode (Options.SyncInterval zero) that write is fdatasynced
// first, if the group holds a send, so an answered send survives a power
// loss (receives, deletes and moves need not wait: doc.go): one sync of a
// sequential append, where a bbolt commit takes two (its pages, then its
// meta page) and rewrites the pages of the tree it touched. In interval
// mode the log is fdatasynced once per interval instead; until then the
// answered changes are in the operating system's page cache and survive
// a crash of the process.
//
// A checkpoint commits the open transaction to the store file (bbolt's
// two fsyncs) every checkpointEvery, or at once when the log has grown
// past checkpointBytes, and the log starts again. Short checkpoints keep
// the writer's pause short: the pause grows with the pages a checkpoint
// writes, and measured here at 8,000 sends/s a 50 ms checkpoint paused
// the writer for 2–4 ms, a 1 s one for 30–60 ms. The size bound keeps
// them short under heavy load, where 50 ms of sends is megabytes.
//
// A record is length (4) ‖ CRC-32C (4) ‖ epoch (8) ‖ changes, the CRC
// covering epoch and changes. The epoch is kept in the meta bucket
// ("log_epoch"), drawn at random at every Open (so that no one can write
// a record of a coming epoch into a message body) and bumped by every
// checkpoint; after that commit the log is written again from its start. Open replays, in order, the records from the start of the file
// that carry the store's epoch, and stops at the first that does not or
// whose CRC fails: older records (already committed) or a record torn by
// a power loss. If whole records of the epoch follow the one it stopped
// at, bytes were changed on disk or a power loss wrote back part of an
// unsynced tail: Open says so at ERROR and keeps a copy of the log as it
// found it (keepDamagedLog), since the replay cannot tell which. The changes are physical (put, delete, set sequence,
// create bucket), so replaying a record whose changes a commit already
// holds changes nothing.
//
// A change is kind (1) ‖ uvarint-prefixed bucket ‖ key ‖ value.
//
// The first record of an epoch starts with a put of "log_prev_end" in
// the meta bucket: where the records of the epoch before ended in their
// log. A replay of two epochs replays the first up to there (beyond are
// the leftovers of an append that failed) and the second only if the
// first reached there (replayEpochs). In interval mode a checkpoint moves to the
// next epoch before its commit has made the records of the one before
// durable, so a power loss can keep the next epoch's records (synced by
// an interval sync, or written back by the operating system) and lose
// the tail of the one before: applied over that gap they would lease or
// delete messages whose sends were lost, leaving states with no body.
// Then the replay stops at the gap, as it does at a torn record. Older
// builds apply the put like any other and never read it.

const (
	logPut byte = 1 + iota
	logDelete
	logSetSequence
	logCreateBucket
)

const (
	// checkpointEvery is how often the open transaction is committed to
	// the store file, or every Options.SyncInterval if that is longer.
	checkpointEvery = 50 * time.Millisecond
	// checkpointBytes of log make a checkpoint at once, so that under a
	// heavy load a checkpoint stays short too (see the package comment on
	// its pause). Against 16 MiB, where a checkpoint held 50 ms of sends,
	// old and new alternated 5 times: BenchmarkEmbeddedSendLatency (40,000
	// single sends/s, fsync always) p99 4.0-21 ms, median 4.4 ms, against
	// 4.1-24 ms, median 10 ms; BenchmarkSubmitBatch/keys=false 164k
	// against 151k jobs/s (means), p99 per call 13.9 against 18.3 ms,
	// CPU per job 10.0 against 10.9 µs. 256 KiB cut the first p99 further
	// (2-8 ms) but cost the batches 9 % of their CPU: too many commits.
	checkpointBytes = 1 << 20
	// maxDeferredBytes of changes made while a checkpoint commits make
	// the writer wait for it.
	maxDeferredBytes = 16 << 20
	logHeaderLen     = 16
	// logRewindAt is the file size past which a commit truncates the log
	// instead of only writing it again from the start.
	logRewindAt = 64 << 20
)

var (
	logEpochKey   = []byte("log_epoch")
	logPrevEndKey = []byte("log_prev_end")
	castagnoli    = crc32.MakeTable(crc32.Castagnoli)
)

// redoLog is the open log file; only the writer uses it.
type redoLog struct {
	f        *os.File
	off      int64  // end of the current epoch's records
	size     int64  // file size, old records included
	buf      []byte // the record being written
	unsynced bool   // records written since the last sync
}

func openLog(path string) (*redoLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open redo log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open redo log: %w", err), f.Close())
	}
	return &redoLog{f: f, size: st.Size()}, nil
}

// append writes one record of changes with one write.
func (l *redoLog) append(epoch uint64, changes []byte) error {
	l.buf = append(l.buf[:0], make([]byte, logHeaderLen)...)
	binary.BigEndian.PutUint32(l.buf[0:], uint32(len(changes)))
	binary.BigEndian.PutUint64(l.buf[8:], epoch)
	l.buf = append(l.buf, changes...)
	binary.BigEndian.PutUint32(l.buf[4:], crc32.Checksum(l.buf[8:], castagnoli))
	if _, err := l.f.WriteAt(l.buf, l.off); err != nil {
		return fmt.Errorf("write redo log: %w", err)
	}
	l.off += int64(len(l.buf))
	l.size = max(l.size, l.off)
	l.unsynced = true
	if cap(l.buf) > 1<<20 {
		l.buf = nil // one large group should not pin its buffer
	}
	return nil
}

// sync makes the records written so far durable. fdatasync, not fsync:
// the log is written in place from its start after each checkpoint, so
// its size seldom changes and no other metadata needs a sync.
func (l *redoLog) sync() error {
	if err := syncFile(l.f); err != nil {
		return err
	}
	l.unsynced = false
	return nil
}

// syncFile fdatasyncs a log file; interval mode runs it beside the writer.
func syncFile(f *os.File) error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("sync redo log: %w", err)
	}
	return nil
}

// contents reads the current epoch's records back.
func (l *redoLog) contents() ([]byte, error) {
	data := make([]byte, l.off)
	if _, err := l.f.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("read redo log: %w", err)
	}
	return data, nil
}

// rewind starts the log again after a commit made its records durable.
// Records left behind carry an older epoch, which ends a replay.
func (l *redoLog) rewind() error {
	l.off = 0
	if l.size < logRewindAt {
		return nil
	}
	l.size = 0
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("truncate redo log: %w", err)
	}
	return nil
}

func (l *redoLog) close() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("close redo log: %w", err)
	}
	return nil
}

// readLogFile returns the log at path, or nothing when there is none.
func readLogFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read redo log: %w", err)
	}
	return data, nil
}

// appendChange adds one change to a record's changes.
func appendChange(dst []byte, kind byte, bucket, key, value []byte) []byte {
	dst = append(dst, kind)
	for _, s := range [][]byte{bucket, key, value} {
		dst = appendVarlen(dst, s)
	}
	return dst
}

// appendVarlen appends b to dst after its length as a uvarint: the field
// encoding of log changes and key lists, read back by cutVarlen.
func appendVarlen[T []byte | string](dst []byte, b T) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(b))), b...)
}

// cutVarlen splits a field written by appendVarlen off the front of b.
func cutVarlen(b []byte) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	return b[w : w+int(n)], b[w+int(n):], true
}

// replayLog applies to tx, in order, the records at the start of data
// that carry epoch, and returns how many it applied and where they end.
// A torn or older record ends the replay; a record that passes its CRC
// but does not parse is an error. When the record that ends the replay
// is followed by whole records of epoch, it returns that as damage:
// bytes changed in the middle of the log, or a power loss that wrote
// back a later page of its unsynced tail and not an earlier one. The
// replay stops there all the same, since which it was cannot be told,
// but the caller says so (found in a filesystem walkthrough: 16 bytes
// flipped, 104 acknowledged jobs gone with an INFO line).
func replayLog(tx *bolt.Tx, data []byte, epoch uint64) (n int, end int64, damage *damagedLog, err error) {
	for {
		changes, size, ok := nextRecord(data[end:], epoch)
		if !ok {
			if next, found := wholeRecordAfter(data, end, epoch); found {
				damage = &damagedLog{at: end, next: next}
			}
			return n, end, damage, nil
		}
		if err := applyChanges(tx, changes); err != nil {
			return n, end, nil, fmt.Errorf("redo log record %d: %w", n, err)
		}
		n++
		end += int64(size)
	}
}

// damagedLog says where a replay of a redo log stopped, at a record that
// is not whole, and where the first whole record of the same epoch after
// it starts. file is the log file's index (logPaths).
type damagedLog struct {
	file     int
	at, next int64
}

// wholeRecordAfter returns the offset of the first whole record of epoch
// that starts after from in data. A candidate must carry the epoch's
// eight bytes where a record does, so the search costs about one pass.
func wholeRecordAfter(data []byte, from int64, epoch uint64) (int64, bool) {
	mark := binary.BigEndian.AppendUint64(nil, epoch)
	for off := from + 1; off+logHeaderLen <= int64(len(data)); off++ {
		i := bytes.Index(data[off+8:], mark)
		if i < 0 {
			return 0, false
		}
		off += int64(i)
		if _, _, ok := nextRecord(data[off:], epoch); ok {
			return off, true
		}
	}
	return 0, false
}

// nextRecord returns the changes of the record at the start of data and
// its size, if it is whole and carries epoch.
func nextRecord(data []byte, epoch uint64) (changes []byte, size int, ok bool) {
	if len(data) < logHeaderLen {
		return nil, 0, false
	}
	n := int(binary.BigEndian.Uint32(data[0:]))
	if n > len(data)-logHeaderLen {
		return nil, 0, false
	}
	rec := data[8 : logHeaderLen+n]
	if crc32.Checksum(rec, castagnoli) != binary.BigEndian.Uint32(data[4:]) || binary.BigEndian.Uint64(rec) != epoch {
		return nil, 0, false
	}
	return rec[8:], logHeaderLen + n, true
}

// replayEpochs applies to tx the records of epoch, then those of the
// epoch after it if they follow on, each from whichever of files holds
// them (an older build kept one log file), and returns how many it
// applied. The first record of the epoch after says where epoch's
// records end: records of epoch found past there are the leftovers of
// an append that failed (its group was refused and the log's end set
// back), and are not replayed; if epoch's end short of there, the
// epoch after is not replayed (a power loss kept it and lost their
// tail).
func replayEpochs(tx *bolt.Tx, files [2][]byte, epoch uint64, log *slog.Logger) (int, []*damagedLog, error) {
	end := int64(-1) // unknown: no record of the next epoch, or no mark
	for _, d := range files {
		if e, ok := prevEnd(d, epoch+1); ok {
			end = e
		}
	}
	var damage []*damagedLog
	replay := func(i int, d []byte, epoch uint64) (int, int64, error) {
		n, e, dmg, err := replayLog(tx, d, epoch)
		if dmg != nil {
			dmg.file = i
			damage = append(damage, dmg)
		}
		return n, e, err
	}
	total, reached := 0, int64(0)
	for i, d := range files {
		if end >= 0 && end < int64(len(d)) {
			d = d[:end]
		}
		n, e, err := replay(i, d, epoch)
		if err != nil {
			return total, damage, err
		}
		if n > 0 || len(damage) > 0 {
			total, reached = n, e
			break
		}
	}
	if end >= 0 && reached != end {
		log.Warn("redo log: the records of the last epoch do not follow on from those before, which end early (lost at a power loss); left out",
			slog.Int64("want_end", end), slog.Int64("end", reached))
		return total, damage, nil
	}
	for i, d := range files {
		found := len(damage)
		n, _, err := replay(i, d, epoch+1)
		if total += n; err != nil || n > 0 || len(damage) > found {
			return total, damage, err
		}
	}
	return total, damage, nil
}

// appendPrevEnd adds the change that starts an epoch's first record: the
// end of the records of the epoch before.
func appendPrevEnd(dst []byte, end int64) []byte {
	return appendChange(dst, logPut, metaBucket, logPrevEndKey, binary.BigEndian.AppendUint64(nil, uint64(end)))
}

// prevEnd returns where the records of the epoch before end, as the
// first record of epoch at the start of data says; false if there is no
// such record or it does not say (an older build's).
func prevEnd(data []byte, epoch uint64) (int64, bool) {
	changes, _, ok := nextRecord(data, epoch)
	if !ok || len(changes) == 0 || changes[0] != logPut {
		return 0, false
	}
	var parts [3][]byte
	rest := changes[1:]
	for i := range parts {
		if parts[i], rest, ok = cutVarlen(rest); !ok {
			return 0, false // applyChanges reports it
		}
	}
	if !bytes.Equal(parts[0], metaBucket) || !bytes.Equal(parts[1], logPrevEndKey) || len(parts[2]) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(parts[2])), true
}

// openBuckets are the buckets a replay has changed so far, by name, each
// with a cursor for its deletes: no lookup per change, and no cursor made
// per delete (bbolt's Bucket.Delete grows a fresh cursor's stack each
// time; writeTx.delAt). The writer applies the deletes deferred during a
// checkpoint here, one or two per job drained.
type openBuckets map[string]openBucket

type openBucket struct {
	b *bolt.Bucket
	c *bolt.Cursor
}

// get returns bucket name of tx and its cursor; nil if there is none.
func (o openBuckets) get(tx *bolt.Tx, name []byte) (*bolt.Bucket, *bolt.Cursor) {
	if e, ok := o[string(name)]; ok {
		return e.b, e.c
	}
	b := tx.Bucket(name)
	if b == nil {
		return nil, nil
	}
	c := b.Cursor()
	o[string(name)] = openBucket{b, c}
	return b, c
}

func applyChanges(tx *bolt.Tx, changes []byte) error {
	open := openBuckets{}
	for len(changes) > 0 {
		kind := changes[0]
		changes = changes[1:]
		var parts [3][]byte
		for i := range parts {
			var ok bool
			if parts[i], changes, ok = cutVarlen(changes); !ok {
				return errors.New("malformed change")
			}
		}
		bucket, key, value := parts[0], parts[1], parts[2]
		if kind == logCreateBucket {
			if _, err := tx.CreateBucketIfNotExists(bucket); err != nil {
				return fmt.Errorf("create bucket %s: %w", bucket, err)
			}
			continue
		}
		b, c := open.get(tx, bucket)
		if b == nil {
			return fmt.Errorf("bucket %s missing", bucket)
		}
		var err error
		switch kind {
		case logPut:
			err = b.Put(key, value)
		case logDelete:
			err = deleteAt(c, key) // Bucket.Delete, with a kept cursor
		case logSetSequence:
			if len(value) != 8 {
				return errors.New("malformed sequence change")
			}
			err = b.SetSequence(binary.BigEndian.Uint64(value))
		default:
			return fmt.Errorf("unknown change kind %d", kind)
		}
		if err != nil {
			return fmt.Errorf("bucket %s: %w", bucket, err)
		}
	}
	return nil
}
