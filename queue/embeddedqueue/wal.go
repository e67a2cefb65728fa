package embeddedqueue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"

	bolt "go.etcd.io/bbolt"
)

// The redo log of interval mode (Options.SyncInterval > 0).
//
// In interval mode the writer keeps one bbolt transaction open across
// groups and commits it, with its fsync, once per interval. Each group's
// changes to that transaction are also appended, with one write and no
// fsync, to the log file beside the store (<store>.wal) before the group's
// callers are answered: from then on the changes are in the operating
// system's page cache and survive a crash of the process.
//
// A record is length (4) ‖ CRC-32C (4) ‖ epoch (8) ‖ changes, the CRC
// covering epoch and changes. The epoch is the number of interval commits
// the store has made, kept in the meta bucket ("log_epoch") and bumped by
// every commit that makes the log's records durable; after that commit
// the log is written again from its start. Open replays, in order, the
// records from the start of the file that carry the store's epoch, and
// stops at the first that does not or whose CRC fails: older records
// (already committed) or a record torn by a power loss. The changes are
// physical (put, delete, set sequence, create bucket), so replaying a
// record whose changes a commit already holds changes nothing.
//
// A change is kind (1) ‖ uvarint-prefixed bucket ‖ key ‖ value.

const (
	logPut byte = 1 + iota
	logDelete
	logSetSequence
	logCreateBucket
)

const (
	logHeaderLen = 16
	// logRewindAt is the file size past which a commit truncates the log
	// instead of only writing it again from the start.
	logRewindAt = 64 << 20
)

var (
	logEpochKey = []byte("log_epoch")
	castagnoli  = crc32.MakeTable(crc32.Castagnoli)
)

// redoLog is the open log file of interval mode; only the writer uses it.
type redoLog struct {
	f    *os.File
	off  int64  // end of the current epoch's records
	size int64  // file size, old records included
	buf  []byte // the record being written
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
	if cap(l.buf) > 1<<20 {
		l.buf = nil // one large group should not pin its buffer
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
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

// replayLog applies to tx, in order, the records at the start of data
// that carry epoch, and returns how many it applied. A torn or older
// record ends the replay; a record that passes its CRC but does not
// parse is an error.
func replayLog(tx *bolt.Tx, data []byte, epoch uint64) (int, error) {
	n := 0
	for len(data) >= logHeaderLen {
		size := int(binary.BigEndian.Uint32(data[0:]))
		if size > len(data)-logHeaderLen {
			break
		}
		rec := data[8 : logHeaderLen+size]
		if crc32.Checksum(rec, castagnoli) != binary.BigEndian.Uint32(data[4:]) || binary.BigEndian.Uint64(rec) != epoch {
			break
		}
		if err := applyChanges(tx, rec[8:]); err != nil {
			return n, fmt.Errorf("redo log record %d: %w", n, err)
		}
		n++
		data = data[logHeaderLen+size:]
	}
	return n, nil
}

func applyChanges(tx *bolt.Tx, changes []byte) error {
	for len(changes) > 0 {
		kind := changes[0]
		changes = changes[1:]
		var parts [3][]byte
		for i := range parts {
			l, k := binary.Uvarint(changes)
			if k <= 0 || l > uint64(len(changes)-k) {
				return errors.New("malformed change")
			}
			parts[i] = changes[k : k+int(l)]
			changes = changes[k+int(l):]
		}
		bucket, key, value := parts[0], parts[1], parts[2]
		if kind == logCreateBucket {
			if _, err := tx.CreateBucketIfNotExists(bucket); err != nil {
				return fmt.Errorf("create bucket %s: %w", bucket, err)
			}
			continue
		}
		b := tx.Bucket(bucket)
		if b == nil {
			return fmt.Errorf("bucket %s missing", bucket)
		}
		var err error
		switch kind {
		case logPut:
			err = b.Put(key, value)
		case logDelete:
			err = b.Delete(key)
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

// applyLogged runs a group in interval mode: in the open transaction,
// answered once its record is in the log. A degraded backend commits the
// group at once instead. On any failure the transaction is rebuilt from
// the store and the log, without the group.
func (b *Backend) applyLogged(group []*op) error {
	if b.broken != nil {
		return b.broken
	}
	if b.tx == nil {
		tx, err := b.db.Begin(true)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		b.tx = tx
	}
	w := &writeTx{tx: b.tx, now: b.opts.Clock().UnixNano(), logging: true, log: b.logBuf[:0]}
	var err error
	b.mu.Lock()
	for _, o := range group {
		if err = o.apply(w); err != nil {
			break
		}
	}
	b.mu.Unlock()
	b.logBuf = w.log[:0]
	if cap(b.logBuf) > 1<<20 {
		b.logBuf = nil
	}
	switch {
	case err != nil:
	case !w.dirty:
		return nil
	case b.degraded:
		b.pending = true
		if err = b.flush(); err == nil {
			b.grouped.Add(int64(len(group)))
			return nil
		}
		return fmt.Errorf("commit: %w", err) // flush rebuilt the transaction
	default:
		if err = b.log.append(b.epoch, w.log); err == nil {
			b.pending = true
			b.grouped.Add(int64(len(group)))
			return nil
		}
	}
	b.rebuild()
	return fmt.Errorf("commit: %w", err)
}

// flush commits the open transaction, making the logged changes durable,
// and starts a new log epoch. A failed commit degrades the backend and
// rebuilds the transaction from the log.
func (b *Backend) flush() error {
	if b.tx == nil {
		return nil
	}
	if !b.pending {
		err := b.tx.Rollback()
		b.tx = nil
		return err
	}
	err := b.tx.Bucket(metaBucket).Put(logEpochKey, binary.BigEndian.AppendUint64(nil, b.epoch+1))
	if err == nil {
		err = b.tx.Commit() // the fsync
	}
	if err != nil {
		b.degraded = true
		b.rebuild()
		return err
	}
	b.tx, b.pending, b.degraded = nil, false, false
	b.epoch++
	b.commits.Add(1)
	if err := b.log.rewind(); err != nil {
		b.opts.Logger.Warn("redo log", slog.Any("error", err))
	}
	return nil
}

// rebuild drops the open transaction and opens a new one holding what is
// committed plus the current epoch's log records, and rebuilds the index
// from it. If that fails the backend is broken: the log stays for the
// next Open to replay, and every call fails.
func (b *Backend) rebuild() {
	if b.tx != nil {
		_ = b.tx.Rollback() // a failed Commit has closed it already
		b.tx = nil
	}
	err := func() error {
		data, err := b.log.contents()
		if err != nil {
			return err
		}
		tx, err := b.db.Begin(true)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		n, err := replayLog(tx, data, b.epoch)
		if err == nil {
			b.mu.Lock()
			err = b.loadFromLocked(tx)
			b.mu.Unlock()
		}
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		b.tx, b.pending = tx, n > 0
		return nil
	}()
	if err != nil {
		b.broken = fmt.Errorf("rebuild from the redo log (reopen the store to recover): %w", err)
		b.opts.Logger.Error("embedded queue unusable", slog.Any("error", b.broken))
	}
}

// closeLog commits what the open transaction holds and closes the log;
// the writer runs it as it stops. If the commit fails the log keeps the
// changes for the next Open.
func (b *Backend) closeLog() {
	if b.broken == nil {
		if err := b.flush(); err != nil {
			b.opts.Logger.Error("final commit failed; the redo log keeps the changes for the next open", slog.Any("error", err))
		}
	}
	if b.tx != nil {
		_ = b.tx.Rollback()
		b.tx = nil
	}
	if err := b.log.close(); err != nil {
		b.opts.Logger.Error("close", slog.Any("error", err))
	}
}
