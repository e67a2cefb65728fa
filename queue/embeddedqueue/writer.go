package embeddedqueue

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/internal/dirsync"
	"github.com/sluice-dev/sluice/queue"
)

// The writer: groups, the redo log and checkpoints (see wal.go for the
// log's format).
//
// Each group is applied to the open transaction and its changes are
// appended to the log of the current epoch; its callers are answered once
// that record is synced (default mode, unless every operation in the
// group is lazy: doLazy) or written (interval mode, and lazy groups).
// Every checkpointEvery the writer hands the open transaction, stamped
// with the next epoch, to a goroutine that commits it, and goes on at
// once: the records of the next epoch go to the other log file, and while
// the commit runs there is no transaction to apply groups to. Blind
// operations are still applied, to the index and the log, and their
// changes are kept to be applied to the next transaction when the commit
// ends: sends, deletes and visibility changes, which read only the index,
// and receives of messages whose records are still in memory (added since
// the checkpoint before; memQueue.recent and committing), which in steady
// state are all of them. A receive that must read older records from the
// store, and the sweep and queue changes, wait for the commit. So a
// checkpoint's two fsyncs hold up no send, and seldom a receive.
//
// Which files hold what: the store file holds every change up to its
// epoch (storeEpoch); the log of storeEpoch's parity holds that epoch's
// records, and while a checkpoint commits, the other log holds the next
// epoch's. Open, and the writer after a failure, replay the records of
// storeEpoch and then those of storeEpoch+1. A log file is written from
// its start again only when its records are older than storeEpoch.

// writer applies operations in groups: it takes the first waiting
// operation and whatever else is queued behind it, so callers that arrive
// while a group is syncing share the next one. There is no linger.
func (b *Backend) writer() {
	defer close(b.writerDone)
	defer b.closeLog()
	every := max(b.opts.SyncInterval, cmp.Or(b.knobs.checkpointEvery, checkpointEvery))
	checkpoint := time.NewTicker(every)
	defer checkpoint.Stop()
	var syncLog <-chan time.Time
	if b.opts.SyncInterval > 0 && b.opts.SyncInterval < every {
		t := time.NewTicker(b.opts.SyncInterval)
		defer t.Stop()
		syncLog = t.C
	}
	for {
		select {
		case o := <-b.ops:
			b.commit(b.gather(o))
		case err := <-b.checkpointDone:
			b.endCheckpoint(err)
		case <-syncLog:
			b.syncLog()
		case err := <-b.logSynced:
			b.endSyncLog(err)
		case <-checkpoint.C:
			b.startCheckpoint()
		case <-b.knobs.checkpointNow:
			b.startCheckpoint()
		case <-b.closing:
			// Close has stopped new hand-overs; finish what was accepted.
			for {
				select {
				case o := <-b.ops:
					b.commit(b.gather(o))
				default:
					b.waitCheckpoint()
					if len(b.held) == 0 {
						return
					}
				}
				b.commitHeld()
			}
		}
		b.commitHeld()
	}
}

// commitHeld applies the operations held back during a checkpoint, once
// it has ended.
func (b *Backend) commitHeld() {
	if b.checkpointing || len(b.held) == 0 {
		return
	}
	held := b.held
	b.held = nil
	b.commit(held)
}

func (b *Backend) gather(first *op) []*op {
	if b.knobs.beforeGroup != nil {
		b.knobs.beforeGroup()
	}
	group := append(b.groupBuf[:0], first) //nolint:gocritic // reuses groupBuf's array
	size := first.bytes
	for len(group) < b.opts.MaxGroupCommit && size < maxGroupBytes {
		select {
		case o := <-b.ops:
			group = append(group, o)
			size += o.bytes
		default:
			return group
		}
	}
	return group
}

// commit applies a group and answers its callers; while a checkpoint
// commits, the operations that read the store are held back instead.
func (b *Backend) commit(group []*op) {
	if b.checkpointing {
		blind := group[:0]
		for _, o := range group {
			if o.blind {
				blind = append(blind, o)
			} else {
				b.held = append(b.held, o)
			}
		}
		clear(group[len(blind):])
		if group = blind; len(group) == 0 {
			return
		}
	}
	start := time.Now()
	err := b.apply(group)
	if observe := b.observe.Load(); observe != nil && err == nil {
		(*observe)(len(group), time.Since(start))
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", queue.ErrUnavailable, err)
	}
	for i, o := range group {
		if o.heldBack {
			o.heldBack = false // answered when it runs again
		} else {
			o.done <- err
		}
		group[i] = nil
	}
	b.groupBuf = group[:0]
}

// apply runs a group in the open transaction (none while a checkpoint
// commits), answered once its record is in the log: synced there in the
// default mode unless the group is lazy (needsSync), written in interval
// mode. A degraded backend commits the group at once instead. On any
// failure the transaction is rebuilt from the store and the log, without
// the group.
func (b *Backend) apply(group []*op) error {
	if b.broken != nil {
		return b.broken
	}
	if b.tx == nil && !b.checkpointing {
		tx, err := b.db.Begin(true)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		b.tx = tx
	}
	w := &writeTx{tx: b.tx, now: b.opts.Clock().UnixNano(), log: b.logBuf[:0]}
	var err error
	b.mu.Lock()
	for _, o := range group {
		err = o.apply(w)
		if errors.Is(err, errNeedsStore) {
			o.heldBack, err = true, nil
			b.held = append(b.held, o)
			continue
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = w.setSequences()
	}
	b.mu.Unlock()
	b.logBuf = w.log[:0]
	if cap(b.logBuf) > 1<<20 {
		b.logBuf = nil
	}
	switch {
	case err != nil:
	case len(w.log) == 0:
		return nil
	case b.degraded:
		b.pending = true
		if err = b.flush(); err == nil {
			b.commits.Add(1)
			b.grouped.Add(int64(len(group)))
			return nil
		}
		return fmt.Errorf("commit: %w", err) // flush rebuilt the transaction
	default:
		if err = b.appendLog(w.log, needsSync(group)); err == nil {
			b.grouped.Add(int64(len(group)))
			b.afterAppend(w.log)
			return nil
		}
	}
	b.waitCheckpoint()
	b.rebuild()
	if b.opts.SyncInterval == 0 {
		// A failed write or sync may leave the lazy records before it
		// never written (Linux can mark the pages a failed fdatasync did
		// not write clean), while the sends answered after it are synced:
		// a replay would stop at that gap and lose them. Commit the store
		// now, so that nothing answered later depends on those records;
		// if that fails too, the backend degrades.
		b.checkpoint()
	}
	return fmt.Errorf("commit: %w", err)
}

// afterAppend keeps a logged group's changes for the next transaction
// while a checkpoint commits, and starts a checkpoint once the log is
// long. If the changes kept grow long, the writer waits for the commit.
func (b *Backend) afterAppend(changes []byte) {
	if !b.checkpointing {
		b.pending = true
		if b.log.off >= checkpointBytes {
			b.startCheckpoint()
		}
		return
	}
	b.deferred = append(b.deferred, changes...)
	if len(b.deferred) >= maxDeferredBytes {
		b.waitCheckpoint()
	}
}

// appendLog writes a group's record to the log and, in the default mode,
// syncs it unless sync is false (a group of lazy operations: doLazy). If
// either fails the record is dropped from the log's end, so a rebuild
// leaves the group out.
func (b *Backend) appendLog(changes []byte, sync bool) error {
	start := b.log.off
	if start == 0 { // the epoch's first record says where the one before ended (wal.go)
		changes = append(appendPrevEnd(make([]byte, 0, 32+len(changes)), b.prevEnd), changes...)
	}
	err := b.log.append(b.epoch, changes)
	if err == nil && b.opts.SyncInterval == 0 && sync {
		err = b.syncLogNow()
	}
	if err != nil {
		b.log.off = start
	}
	return err
}

// syncLog starts making the records written since the last sync durable:
// interval mode's periodic sync between checkpoints. It runs beside the
// writer, which goes on appending: answers in this mode wait for no sync,
// and an fdatasync queued behind a checkpoint's page writes could hold
// the writer, and every call, for tens of milliseconds. One sync runs at
// a time; a tick during it is skipped.
func (b *Backend) syncLog() {
	if !b.log.unsynced || b.logSyncing || b.broken != nil {
		return
	}
	b.log.unsynced, b.logSyncing = false, true
	f, off := b.log.f, b.log.off
	go func() {
		if b.knobs.beforeLogSync != nil {
			b.knobs.beforeLogSync()
		}
		err := syncFile(f)
		if err == nil && b.knobs.logSynced != nil {
			b.knobs.logSynced(f.Name(), off)
		}
		b.logSynced <- err
	}()
}

// endSyncLog takes the outcome of a sync started by syncLog. A failed
// sync commits the store at once, as the default mode does after a failed
// sync (apply): Linux can mark the pages a failed fdatasync did not write
// clean, so a later sync that succeeds leaves a gap before its records,
// and a replay after a power loss would stop there, losing calls answered
// and synced long after the failure
// (TestFailedIntervalSyncLeavesNoGap). If the commit fails too, the
// backend degrades and commits every group.
func (b *Backend) endSyncLog(err error) {
	b.logSyncing = false
	if err != nil {
		b.opts.Logger.Error("interval sync failed; committing the store", slog.Any("error", err))
		b.log.unsynced = true
		b.checkpoint()
		return
	}
	b.commits.Add(1)
}

// syncLogNow syncs the current log on the writer: the default mode's
// sync of a group's record, or of lazy records before a checkpoint.
func (b *Backend) syncLogNow() error {
	if b.knobs.failLogSync != nil {
		if err := b.knobs.failLogSync(); err != nil {
			return fmt.Errorf("sync redo log: %w", err)
		}
	}
	if err := b.log.sync(); err != nil {
		return err
	}
	b.commits.Add(1)
	if b.knobs.logSynced != nil {
		b.knobs.logSynced(b.log.f.Name(), b.log.off)
	}
	return nil
}

// waitSyncLog waits for the sync under way, if any, to end.
func (b *Backend) waitSyncLog() {
	if b.logSyncing {
		b.endSyncLog(<-b.logSynced)
	}
}

// startCheckpoint hands the open transaction, stamped with the next
// epoch, to a goroutine that commits it, and switches to the next epoch's
// log. A degraded backend commits at once instead.
func (b *Backend) startCheckpoint() {
	switch {
	case b.checkpointing || b.broken != nil || b.tx == nil:
		return
	case b.degraded:
		b.checkpoint()
		return
	case !b.pending:
		_ = b.tx.Rollback() // nothing written; a fresh one sees the store as it is now
		b.tx = nil
		return
	}
	// In the default mode lazy records may be unsynced. Sync them before
	// the next epoch starts: its records are synced as they are answered,
	// and a power loss that kept them but lost this epoch's tail would
	// end the replay at the gap (wal.go), losing answered sends.
	if b.opts.SyncInterval == 0 && b.log.unsynced {
		if err := b.syncLogNow(); err != nil {
			b.opts.Logger.Error("sync redo log before checkpoint", slog.Any("error", err))
			b.checkpoint() // commits at once, or degrades
			return
		}
	}
	tx := b.tx
	if err := tx.Bucket(metaBucket).Put(logEpochKey, binary.BigEndian.AppendUint64(nil, b.epoch+1)); err != nil {
		b.checkpoint() // fails the same way, and degrades
		return
	}
	b.mu.Lock()
	for _, q := range b.queues {
		q.committing, q.recent = q.recent, records{}
	}
	b.mu.Unlock()
	b.tx, b.pending, b.checkpointing = nil, false, true
	b.nextEpoch()
	go func() {
		if b.knobs.beforeCheckpoint != nil {
			b.knobs.beforeCheckpoint()
		}
		b.checkpointDone <- b.commitTx(tx)
	}()
}

// endCheckpoint takes the outcome of a checkpoint's commit. On success
// the changes applied meanwhile go into a new transaction; on failure the
// backend is degraded and rebuilds the transaction from both logs.
func (b *Backend) endCheckpoint(err error) {
	b.checkpointing = false
	b.mu.Lock()
	for _, q := range b.queues {
		q.committing = records{}
	}
	b.mu.Unlock()
	deferred := b.deferred
	b.deferred = nil // bbolt keeps the slices it is given until its commit
	if err != nil {
		b.logCheckpointFailed(err)
		b.degraded = true
		b.rebuild()
		return
	}
	b.storeEpoch = b.epoch
	b.checkpoints.Add(1)
	if len(deferred) == 0 {
		return
	}
	err = func() error {
		tx, err := b.db.Begin(true)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		b.tx = tx
		return applyChanges(tx, deferred)
	}()
	if err != nil {
		b.opts.Logger.Error("apply the changes made during a checkpoint", slog.Any("error", err))
		b.rebuild()
		return
	}
	b.pending = true
}

// waitCheckpoint waits for the checkpoint under way, if any, to end.
func (b *Backend) waitCheckpoint() {
	if b.checkpointing {
		b.endCheckpoint(<-b.checkpointDone)
	}
}

// checkpoint commits the open transaction at once and logs a failure;
// the groups it holds are durable in the log already.
func (b *Backend) checkpoint() {
	b.waitCheckpoint()
	if err := b.flush(); err != nil {
		b.logCheckpointFailed(err)
	}
}

// logCheckpointFailed logs a failed checkpoint, at most once per
// ratelog.Every: on a full or read-only disk each group's commit fails
// (the store is degraded), and the line came 20 times a second onto what
// is often the same disk (found in a filesystem walkthrough).
func (b *Backend) logCheckpointFailed(err error) {
	b.checkpointFailedLine.Do(func(skipped int64) {
		b.opts.Logger.Error("checkpoint failed; committing every call until one succeeds", slog.Any("error", err), slog.Int64("suppressed_since_last_line", skipped))
	})
}

// flush commits the open transaction to the store file, stamped with the
// next epoch, and waits for the commit. A failed commit degrades the
// backend and rebuilds the transaction from the logs. No checkpoint may
// be under way.
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
		err = b.commitTx(b.tx)
	}
	if err != nil {
		b.degraded = true
		b.rebuild()
		return err
	}
	b.tx, b.pending, b.degraded = nil, false, false
	b.nextEpoch()
	b.storeEpoch = b.epoch
	b.checkpoints.Add(1)
	return nil
}

// commitTx commits a checkpoint's transaction (bbolt's two fsyncs) and
// reports it to the ObserveCheckpoints callback.
func (b *Backend) commitTx(tx *bolt.Tx) error {
	start := time.Now()
	err := tx.Commit()
	if observe := b.observeCheckpoint.Load(); observe != nil {
		(*observe)(time.Since(start), err)
	}
	return err
}

// nextEpoch moves the writer to the next epoch and its log file, written
// again from its start: that file's records are two epochs old, and the
// store holds them. Records not yet synced in interval mode become
// durable with the commit that bumps the epoch, or if it fails with the
// sync that the rebuild after it starts with (syncLogs); until then, a
// replay takes the next epoch's records only if they follow on from the
// last of these (prevEnd, wal.go).
func (b *Backend) nextEpoch() {
	if b.log.unsynced {
		b.log.unsynced = false
		b.commits.Add(1)
	}
	b.prevEnd = b.log.off
	b.epoch++
	b.log = b.logs[b.epoch%2]
	if err := b.log.rewind(); err != nil {
		b.opts.Logger.Warn("redo log", slog.Any("error", err))
	}
}

// rebuild drops the open transaction and opens a new one holding what is
// committed plus the log records beyond it, and rebuilds the index from
// it. If that fails the backend is broken: the logs stay for the next
// Open to replay, and every call fails. No checkpoint may be under way.
// It first syncs both logs (syncLogs): after a failure the writer may
// append nothing to them for a long while, and no interval sync would
// take their unsynced records.
func (b *Backend) rebuild() {
	b.syncLogs()
	if b.tx != nil {
		_ = b.tx.Rollback() // a failed Commit has closed it already
		b.tx = nil
	}
	err := func() error {
		tx, err := b.db.Begin(true)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		n, err := b.replayLogs(tx)
		if err == nil {
			b.mu.Lock()
			// This process holds what is in flight: nothing is released.
			_, err = b.loadFromLocked(tx, false)
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
		b.unusable.Store(&b.broken)
		b.opts.Logger.Error("embedded queue unusable", slog.Any("error", b.broken))
	}
}

// syncLogs syncs both log files, which hold every answered change the
// store lacks; rebuild runs it after a failure. In interval mode their
// last records may be unsynced, and after a failure nothing else might
// sync them: a degraded backend commits each group instead of logging
// it (and with an interval of checkpointEvery or more there is no
// interval sync), a broken one syncs nothing, and a failed checkpoint
// leaves the records of the epoch it held, which nextEpoch counted on
// its commit to make durable, in a log that no interval sync touches
// again (TestFailedCheckpointSyncsTheLogItHeld).
func (b *Backend) syncLogs() {
	for _, l := range b.logs {
		if err := l.sync(); err != nil {
			b.opts.Logger.Error("sync redo log after a failure; a power loss may lose the calls answered since the last checkpoint", slog.Any("error", err))
			continue
		}
		if b.knobs.logSynced != nil {
			b.knobs.logSynced(l.f.Name(), l.off)
		}
	}
}

// replayLogs applies to tx the records of storeEpoch, then those of the
// epoch after it if they follow on, from the open log files.
func (b *Backend) replayLogs(tx *bolt.Tx) (int, error) {
	var files [2][]byte
	for i, l := range b.logs {
		var err error
		if files[i], err = l.contents(); err != nil {
			return 0, err
		}
	}
	n, damage, err := replayEpochs(tx, files, b.storeEpoch, b.opts.Logger)
	for _, d := range damage {
		b.opts.Logger.Error("redo log: rebuilding the open transaction, the replay stopped at a record that is not whole, with whole records after it; left out",
			slog.String("path", b.logs[d.file].f.Name()), slog.Int64("at", d.at), slog.Int64("next_whole_record", d.next))
	}
	return n, err
}

// keepDamagedLog reports a replay of the redo log at path (its bytes,
// data) that stopped at a record that is not whole, with whole records
// after it, and copies the log aside before it is written over: its
// records past the damage are left out, and may be acknowledged jobs.
func keepDamagedLog(path string, data []byte, d *damagedLog, log *slog.Logger) {
	copyPath := fmt.Sprintf("%s.damaged-%d", path, time.Now().Unix())
	err := os.WriteFile(copyPath, data, 0o600)
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	log.Error("redo log: the replay stopped at a record that is not whole, and whole records of the same epoch follow it; they were left out. "+
		"After a power loss this can be a tail that was never synced; otherwise the file was changed on disk and jobs acknowledged after that point are missing. The log as found is kept in copy",
		slog.String("path", path), slog.Int64("at", d.at), slog.Int64("next_whole_record", d.next),
		slog.Int64("bytes_after", int64(len(data))-d.next), slog.String("copy", copyPath), slog.Any("copy_error", err))
}

// recoverLog commits what the redo logs of an earlier run hold beyond the
// store, then opens them for this run. Either file may hold either
// epoch's records: a store written by an older build has one log file.
func (b *Backend) recoverLog() error {
	paths := logPaths(b.db.Path())
	var data [2][]byte
	for i, p := range paths {
		var err error
		if data[i], err = readLogFile(p); err != nil {
			return err
		}
	}
	err := b.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		if v := meta.Get(logEpochKey); len(v) == 8 {
			b.epoch = binary.BigEndian.Uint64(v)
		}
		total, damage, err := replayEpochs(tx, data, b.epoch, b.opts.Logger)
		if err != nil {
			return err
		}
		for _, d := range damage {
			keepDamagedLog(paths[d.file], data[d.file], d, b.opts.Logger)
		}
		if total > 0 {
			b.opts.Logger.Info("replayed the redo log", slog.Int("num_records", total))
		}
		// Every record in either file is older now. The new epoch is
		// drawn at random, not counted on: the log files are written
		// again from their start over older bytes, which include message
		// bodies copied verbatim, and a body holding a well-formed record
		// of the next epoch would be replayed after a crash if a real
		// record happened to end where it begins. Nobody outside can
		// know a random epoch to forge one.
		epoch, err := randomEpoch()
		if err != nil {
			return err
		}
		b.epoch = epoch
		return meta.Put(logEpochKey, binary.BigEndian.AppendUint64(nil, b.epoch))
	})
	if err != nil {
		return fmt.Errorf("replay redo log: %w", err)
	}
	b.storeEpoch = b.epoch
	for i, p := range paths {
		if b.logs[i], err = openLog(p); err != nil {
			if i == 1 {
				err = errors.Join(err, b.logs[0].close())
			}
			return err
		}
	}
	// A log file just created must not vanish with its directory entry
	// at a power loss, taking answered records with it.
	if err := syncDir(filepath.Dir(paths[0])); err != nil {
		return errors.Join(err, b.logs[0].close(), b.logs[1].close())
	}
	b.log = b.logs[b.epoch%2]
	return nil
}

// randomEpoch returns a random epoch in [2^32, 2^32+2^61): far below
// overflow, however many checkpoints follow.
func randomEpoch() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("draw a log epoch: %w", err)
	}
	return 1<<32 + binary.BigEndian.Uint64(b[:])>>3, nil
}

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	if err := dirsync.Sync(dir); err != nil {
		return fmt.Errorf("sync data directory: %w", err) // err names dir
	}
	return nil
}

// closeLog commits what the open transaction holds and closes the logs;
// the writer runs it as it stops. If the commit fails the logs keep the
// changes for the next Open.
func (b *Backend) closeLog() {
	b.waitSyncLog()
	b.waitCheckpoint()
	if b.broken == nil {
		if err := b.flush(); err != nil {
			b.lastCommitErr = err
			b.opts.Logger.Error("final commit failed; the redo log keeps the changes for the next open", slog.Any("error", err))
		}
	} else {
		b.lastCommitErr = b.broken
	}
	if b.tx != nil {
		_ = b.tx.Rollback()
		b.tx = nil
	}
	for _, l := range b.logs {
		if err := l.close(); err != nil {
			b.opts.Logger.Error("close", slog.Any("error", err))
		}
	}
}

// needsSync says whether a group's record must be synced before its
// callers are answered in the default mode: unless every operation in it
// is lazy.
func needsSync(group []*op) bool {
	for _, o := range group {
		if !o.lazy {
			return true
		}
	}
	return false
}
