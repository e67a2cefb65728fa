package embeddedqueue

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/ratelog"
	"github.com/sluice-dev/sluice/queue"
)

// Defaults for Options fields left zero.
const (
	MaxGroupCommitDefault = 512
	SweepIntervalDefault  = time.Minute
	LockTimeoutDefault    = time.Second
)

// maxGroupBytes stops a group from taking more operations once their
// records add up to this much, bounding one transaction's memory.
const maxGroupBytes = 32 << 20

// ErrInUse means another process holds the store's file lock.
var ErrInUse = errors.New("in use by another process")

// Options configures Open. The zero value is ready to use.
type Options struct {
	// Logger receives background events: retention sweeps and failed
	// commits. Defaults to slog.Default().
	Logger *slog.Logger
	// Clock returns the current time for sent-at, visibility and
	// retention. Defaults to time.Now; tests inject a fake clock. Long-poll
	// waits and the sweep interval still run on real timers.
	Clock func() time.Time
	// MaxGroupCommit is the most operations applied in one transaction,
	// that is, sharing one fsync. Defaults to 512.
	MaxGroupCommit int
	// SweepInterval is how often messages older than their queue's
	// retention are deleted. Defaults to one minute; negative turns the
	// background sweep off (call Sweep instead).
	SweepInterval time.Duration
	// LockTimeout is how long Open waits for the file lock another
	// process holds before it fails with ErrInUse. Defaults to one second.
	LockTimeout time.Duration
	// SyncInterval chooses when a change is made durable. Zero, the default,
	// fsyncs every commit that holds a send (or a queue change or retention
	// sweep) before its callers are answered: an answered send survives a
	// power loss. Receives, deletes, visibility changes and moves are
	// answered once written to the redo log, and synced with the next send
	// or checkpoint: a power loss can undo the last of them, and leaves
	// their messages where they were. A positive interval answers a call
	// once its changes are written to the redo log in the operating system
	// (they survive a crash of the process) and fsyncs once per interval: a
	// power loss can lose the calls answered in the last interval, plus the
	// sync under way.
	SyncInterval time.Duration
	// ReleaseHeld makes the messages in flight when the store was last
	// closed (or its process died) visible at once when it opens, their
	// receive counts kept: for a process that is the store's only
	// consumer, whose leases died with it. Without it they wait out their
	// visibility timeouts, as SQS's would.
	ReleaseHeld bool
}

func (o Options) withDefaults() Options {
	o.Logger = cmp.Or(o.Logger, slog.Default())
	if o.Clock == nil {
		o.Clock = time.Now
	}
	o.MaxGroupCommit = cmp.Or(o.MaxGroupCommit, MaxGroupCommitDefault)
	o.SweepInterval = cmp.Or(o.SweepInterval, SweepIntervalDefault)
	o.LockTimeout = cmp.Or(o.LockTimeout, LockTimeoutDefault)
	return o
}

func (o Options) validate() error {
	switch {
	case o.MaxGroupCommit < 1:
		return fmt.Errorf("max group commit %d, want at least 1", o.MaxGroupCommit)
	case o.LockTimeout < 0:
		return fmt.Errorf("lock timeout %s is negative", o.LockTimeout)
	case o.SyncInterval < 0:
		return fmt.Errorf("sync interval %s is negative", o.SyncInterval)
	}
	return nil
}

// knobs are test hooks that Options does not expose.
type knobs struct {
	maxSize int // bbolt MaxSize: a full disk at this file size
	// checkpointEvery and fileCheckEvery replace the constants when
	// positive.
	checkpointEvery, fileCheckEvery time.Duration
	// checkpointNow starts a checkpoint on each receive.
	checkpointNow chan struct{}
	beforeGroup   func() // run by the writer after taking a group's first operation
	// beforeCheckpoint runs before a checkpoint's commit, beside the
	// writer.
	beforeCheckpoint func()
	// beforeLogSync runs before interval mode's sync of the log, beside
	// the writer.
	beforeLogSync func()
	// logSynced runs after each sync of a log file, with the file and
	// how much of it is durable: on the writer, or beside it for interval
	// mode's periodic sync (which reports the end of the records written
	// when it started).
	logSynced func(path string, durable int64)
	// failLogSync, when it returns an error, fails the default mode's
	// next sync of the log with it, as a disk would.
	failLogSync func() error
	// legacyRecords makes sends write records without a checksum, as
	// format 2 builds did (tests of the upgrade).
	legacyRecords bool
}

// Backend is the embedded queue.Backend. Create it with Open; it is safe
// for concurrent use.
type Backend struct {
	db    *bolt.DB
	opts  Options
	knobs knobs

	mu     sync.Mutex // guards queues and every memQueue in it
	queues map[string]*memQueue
	keys   *keyIndex // unexpired idempotency keys (keys.go, keyindex.go)
	// keysMu guards keys, which the writer alone changes, so that
	// LookupKey does not wait for a whole group's apply (b.mu).
	keysMu sync.Mutex

	ops chan *op
	// opened is the store file as Open found it; gone is set, once, to
	// the error new messages get when its path no longer names it
	// (filewatch.go).
	opened os.FileInfo
	gone   atomic.Pointer[error]
	// lastCommitErr is the final commit's failure, set by the writer as
	// it stops (closeLog), read by Close after.
	lastCommitErr error
	// checkpointFailedLine bounds the log of failed checkpoints.
	checkpointFailedLine ratelog.Line
	// corrupt counts the messages in the corrupt bucket: records that
	// failed their checksum (CorruptMessages); corruptLine bounds their
	// log.
	corrupt     atomic.Int64
	corruptLine ratelog.Line

	closeMu    sync.RWMutex // read-held while handing an op to the writer
	closed     atomic.Bool
	closing    chan struct{}
	writerDone chan struct{}
	sweepDone  chan struct{}

	// unusable holds the writer's broken error once it is set: the index
	// may then hold the changes of the group that failed, so the calls
	// that read it without the writer (Stats, LookupKey, Receive's wait)
	// refuse too.
	unusable atomic.Pointer[error]

	commits     atomic.Int64 // durable points: log syncs, or commits when degraded
	grouped     atomic.Int64
	checkpoints atomic.Int64
	observe     atomic.Pointer[func(ops int, took time.Duration)]
	// observeCheckpoint is ObserveCheckpoints' callback.
	observeCheckpoint atomic.Pointer[func(took time.Duration, err error)]
	// observeCorrupt is ObserveCorruptMessages' callback.
	observeCorrupt atomic.Pointer[func()]
	groupBuf       []*op // the writer's

	// The writer's (writer.go). logs are the redo log files of even and
	// odd epochs; log is the one that records of epoch are appended to,
	// and storeEpoch is the epoch the store file holds. tx is the open
	// transaction; pending says it holds changes not yet checkpointed.
	// While a checkpoint commits (checkpointing), tx is nil: deferred
	// collects the changes of the groups applied meanwhile, and held the
	// operations that must read the store. After a failed commit the
	// backend is degraded: each group commits at once until one
	// succeeds. broken is set when the transaction could not be rebuilt
	// from the log; every call fails. In interval mode a goroutine syncs
	// the log (logSyncing) and reports to logSynced.
	logs           [2]*redoLog
	log            *redoLog
	epoch          uint64
	storeEpoch     uint64
	prevEnd        int64 // where the records of epoch-1 end in their log
	tx             *bolt.Tx
	pending        bool
	checkpointing  bool
	checkpointDone chan error
	logSyncing     bool
	logSynced      chan error
	deferred       []byte
	held           []*op
	degraded       bool
	broken         error
	logBuf         []byte
}

var _ queue.Backend = (*Backend)(nil)

// op is one operation applied by the writer inside a group's transaction.
// apply changes the store through w and the index (b.mu is held); it
// reports per-entry outcomes in its caller's variables and returns only
// storage errors, which fail the whole group.
type op struct {
	apply func(w *writeTx) error
	bytes int
	done  chan error
	// blind says apply can run while a checkpoint commits (writeTx.tx is
	// nil then): it reads nothing from the store file, or returns
	// errNeedsStore, having changed nothing, when it must.
	blind bool
	// heldBack is set while the writer holds the operation back until the
	// checkpoint under way ends.
	heldBack bool
	// lazy says the caller may be answered before its change is synced,
	// in the default mode too (doLazy).
	lazy bool
}

// Open opens or creates the store at path, a file in a data directory
// that only this process may use.
func Open(path string, opts Options) (*Backend, error) {
	return open(path, opts, knobs{})
}

func open(path string, opts Options, k knobs) (_ *Backend, err error) {
	// bbolt reads the store through a memory map and checks its pages with
	// panics: a damaged page panicked, and a file cut short faulted
	// (SIGBUS), ending the process with a Go trace and no word of what to
	// do (found in a filesystem walkthrough). checkPages walks the pages
	// bbolt's open walks, where such damage can be answered; Open's own
	// reads of the store are answered so too.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = damaged(path, r)
		}
	}()
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := checkLogWithoutStore(path); err != nil {
		return nil, fmt.Errorf("open queue store: %w", err)
	}
	if r := checkPages(path, opts.LockTimeout); r != nil {
		return nil, damaged(path, r)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        opts.LockTimeout,
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: true,
		MaxSize:        k.maxSize,
		PageSize:       pageSize,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: data directory %s is %w (waited %s for its file lock)",
			path, filepath.Dir(path), ErrInUse, opts.LockTimeout)
	}
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) && pathErr.Path == path {
		// The file error names the path already ("open <path>: read-only
		// file system"): say it once.
		return nil, fmt.Errorf("open queue store: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	b := &Backend{
		db:         db,
		opts:       opts,
		knobs:      k,
		ops:        make(chan *op, opts.MaxGroupCommit),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
		sweepDone:  make(chan struct{}),

		checkpointDone: make(chan error, 1),
		logSynced:      make(chan error, 1),
	}
	if b.opened, err = os.Stat(path); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", path, err), db.Close())
	}
	if err := b.init(); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", path, err), db.Close())
	}
	go b.writer()
	go b.sweeper()
	return b, nil
}

// checkLogWithoutStore refuses to make a new, empty store beside a redo
// log that holds records. The store file was lost: deleted, emptied, or
// left behind when the data directory was copied. A new store would take
// a new epoch and write the log over, losing for good the jobs it holds
// (found in a filesystem walkthrough: 13,479 acknowledged jobs gone, with
// only an INFO line). The log's records alone cannot rebuild the store.
func checkLogWithoutStore(path string) error {
	switch fi, err := os.Stat(path); {
	case err == nil && fi.Size() > 0, err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil // a store, or an error bolt.Open reports
	}
	logs := logPaths(path)
	for _, p := range logs {
		if fi, err := os.Stat(p); err == nil && fi.Size() >= logHeaderLen {
			what := "missing"
			if _, err := os.Stat(path); err == nil {
				what = "empty"
			}
			return fmt.Errorf("the store file %s is %s, but its redo log %s holds %d bytes: the store was lost (deleted, emptied, or not copied with the data directory), and a new one would write over the log; "+
				"restore the store file, or, to start empty and lose the jobs it held, move %s aside",
				path, what, p, fi.Size(), strings.Join(logs[:], " and "))
		}
	}
	return nil
}

// damaged is the error of a store file that bbolt cannot read (r, what
// it panicked with).
func damaged(path string, r any) error {
	return fmt.Errorf("open queue store: the store file %s is damaged and cannot be read (%v): restore the data directory from a copy or your volume's protection, or move it aside to start empty", path, r)
}

// checkPages reads, in this goroutine, the pages of the store at path
// that bbolt's open walks in one of its own to rebuild the free list,
// where a damaged page's panic or a short file's fault would end the
// process; it returns what a read panicked with, or nil. A store it
// cannot open read-only (none yet, or held by another process) is left
// to bolt.Open to report.
func checkPages(path string, lockTimeout time.Duration) (panicked any) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { panicked = recover() }()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return nil
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			walkBucket(b)
			return nil
		})
	})
	return nil
}

// walkBucket visits every key of b and of the buckets within it.
func walkBucket(b *bolt.Bucket) {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			if nb := b.Bucket(k); nb != nil {
				walkBucket(nb)
			}
		}
	}
}

// logPaths returns the redo log files of the store at path.
func logPaths(path string) [2]string { return [2]string{path + ".wal", path + ".wal.1"} }

// init checks or stamps the file format, replays the redo log and builds
// the index.
func (b *Backend) init() error {
	var upgrading string
	err := b.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		if meta == nil {
			if tx.Bucket(queuesBucket) != nil {
				return errors.New("store written by an older sluice with an unversioned format, which this build cannot read: deliver its jobs with the build that wrote it, then move the data directory aside")
			}
			var err error
			if meta, err = tx.CreateBucket(metaBucket); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(queuesBucket); err != nil {
				return err
			}
			if err := meta.Put(formatKey, []byte(format)); err != nil {
				return err
			}
		}
		switch got := string(meta.Get(formatKey)); {
		case got == format:
		case slices.Contains(upgradable, got):
			upgrading = got // stamped by upgrade, once the redo log is replayed
		default:
			return fmt.Errorf("store format %q, this build reads %q (and upgrades %s): a newer sluice wrote it; run that build, or deliver its jobs with it and move the data directory aside",
				got, format, quoted(upgradable))
		}
		for _, name := range [][]byte{keysBucket, keyExpiryBucket, corruptBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := b.recoverLog(); err != nil {
		return err
	}
	if upgrading != "" {
		err = b.upgrade()
		if err == nil {
			b.opts.Logger.Info("store format upgraded: builds that read only the old format refuse this store from now on",
				slog.String("from", upgrading), slog.String("to", format), slog.String("path", b.db.Path()))
		}
	}
	if err == nil {
		b.mu.Lock()
		err = b.loadLocked()
		b.mu.Unlock()
	}
	if err != nil {
		// No writer will close the logs recoverLog opened: a caller that
		// retries Open would leak two descriptors a try.
		return errors.Join(err, b.logs[0].close(), b.logs[1].close())
	}
	if n := b.corrupt.Load(); n > 0 {
		// Said again at every start: the ERROR of each was said once.
		b.opts.Logger.Warn("the store holds damaged messages kept aside, undelivered, in its corrupt bucket (docs/operations.md)",
			slog.Int64("messages", n), slog.String("path", b.db.Path()))
	}
	return nil
}

// upgrade stamps a store of an upgradable format with this build's, and
// marks where each queue's checksummed records begin: its next sequence
// number. Its records stay as they are: an upgrade that rewrote them
// would take minutes on a store of millions of jobs. It runs after the
// redo log's replay, whose records an older build wrote without a
// checksum, and in one transaction with the stamp: a crash before its
// commit leaves the old format, to be upgraded at the next Open.
func (b *Backend) upgrade() error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		err := tx.Bucket(queuesBucket).ForEach(func(name, _ []byte) error {
			mb := tx.Bucket(msgBucket(string(name)))
			if mb == nil {
				return fmt.Errorf("queue %s: buckets missing", name)
			}
			return meta.Put(crcFromKey(string(name)), binary.BigEndian.AppendUint64(nil, mb.Sequence()+1))
		})
		if err != nil {
			return err
		}
		return meta.Put(formatKey, []byte(format))
	})
	if err != nil {
		return fmt.Errorf("upgrade the store format to %s: %w", format, err)
	}
	return nil
}

// quoted lists formats as the refusal of an unknown one says them.
func quoted(formats []string) string {
	q := make([]string, len(formats))
	for i, f := range formats {
		q[i] = strconv.Quote(f)
	}
	return strings.Join(q, " and ")
}

// loadLocked rebuilds the in-memory index from disk, scanning only the
// small state records and the unexpired idempotency keys, when the store
// opens; with Options.ReleaseHeld the messages that were in flight are
// made visible. Callers hold b.mu or own b.
func (b *Backend) loadLocked() error {
	var released int
	err := b.db.View(func(tx *bolt.Tx) error {
		var err error
		released, err = b.loadFromLocked(tx, b.opts.ReleaseHeld)
		return err
	})
	if err == nil && released > 0 {
		b.opts.Logger.Info("made visible the messages the previous process held in flight: it stopped without answering them, and no other process can hold them",
			slog.Int("messages", released))
	}
	return err
}

// loadFromLocked rebuilds the index from what tx sees. With releaseHeld,
// the messages in flight (received, and neither answered nor visible
// again) are filed as visible now, in the index only, and counted. Only
// the process that opens the store can: the file lock keeps every other
// process out, so what was in flight was held by a process that has
// died, or closed the store, and no one else holds their receipts. Those messages waited out their
// visibility timeout (30 s by default) after a crash before anyone got
// them (found in a walkthrough). The store keeps their state as it was
// until they are received again, so a crash before then releases them
// again. Their receive counts stand. Their receipts still answer, as an
// expired SQS receipt of a message not received since does.
func (b *Backend) loadFromLocked(tx *bolt.Tx, releaseHeld bool) (released int, err error) {
	queues := map[string]*memQueue{}
	now := b.opts.Clock().UnixNano()
	err = tx.Bucket(queuesBucket).ForEach(func(name, v []byte) error {
		spec, id, err := decodeSpec(v)
		if err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
		q := newMemQueue(spec, id)
		mb, sb := tx.Bucket(msgBucket(spec.Name)), tx.Bucket(stateBucket(spec.Name))
		if mb == nil || sb == nil {
			return fmt.Errorf("queue %s: buckets missing", name)
		}
		// Sequence numbers are never reused, not even those of messages
		// deleted at the tail, so no old receipt can match a new message.
		q.nextSeq = mb.Sequence() + 1
		if v := tx.Bucket(metaBucket).Get(crcFromKey(spec.Name)); len(v) == 8 {
			q.crcFrom = binary.BigEndian.Uint64(v)
		}
		if err := sb.ForEach(func(k, v []byte) error {
			m, err := decodeState(v)
			if err != nil || len(k) != 8 {
				return fmt.Errorf("queue %s: message %x: bad state record", name, k)
			}
			if releaseHeld && classOf(m, now) == classInFlight {
				m.visibleAt = now
				released++
			}
			q.put(binary.BigEndian.Uint64(k), m, now)
			return nil
		}); err != nil {
			return err
		}
		queues[spec.Name] = q
		return nil
	})
	if err != nil {
		return 0, err
	}
	keys, err := loadKeys(tx, now)
	if err != nil {
		return 0, err
	}
	b.corrupt.Store(int64(tx.Bucket(corruptBucket).Stats().KeyN))
	for _, old := range b.queues {
		old.wake() // waiters re-check against the new index
	}
	b.queues = queues
	b.keysMu.Lock()
	b.keys = keys
	b.keysMu.Unlock()
	return released, nil
}

// usable returns queue.ErrClosed after Close, the cause wrapped in
// queue.ErrUnavailable once the backend is broken (see Backend.unusable),
// and nil otherwise.
func (b *Backend) usable() error {
	if b.closed.Load() {
		return queue.ErrClosed
	}
	if err := b.unusable.Load(); err != nil {
		return fmt.Errorf("%w: %w", queue.ErrUnavailable, *err)
	}
	return nil
}

// do hands apply to the writer and waits until its group has committed.
// Once handed over an operation runs to the end even if ctx ends, so a
// caller never takes a stored message for a lost one.
func (b *Backend) do(ctx context.Context, bytes int, apply func(w *writeTx) error) error {
	return b.hand(ctx, &op{apply: apply, bytes: bytes, done: make(chan error, 1)})
}

// doBlind is do for an apply that reads nothing from the store file
// (op.blind).
func (b *Backend) doBlind(ctx context.Context, bytes int, apply func(w *writeTx) error) error {
	return b.hand(ctx, &op{apply: apply, bytes: bytes, done: make(chan error, 1), blind: true})
}

// doLazy is doBlind for a change that a power loss may undo without
// losing a message: a receive, delete, visibility change or move. Undone,
// it leaves the message where it was before, to be received again (at
// least once, as SQS). Its record is written to the log before the
// caller is answered, so it survives a crash of the process, and is
// synced with the next group that holds a send, or by the next
// checkpoint (within checkpointEvery). A group of lazy operations alone
// waits for no sync: receiving and acknowledging jobs costs no fdatasync.
func (b *Backend) doLazy(ctx context.Context, bytes int, apply func(w *writeTx) error) error {
	return b.hand(ctx, &op{apply: apply, bytes: bytes, done: make(chan error, 1), blind: true, lazy: true})
}

func (b *Backend) hand(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.closeMu.RLock()
	if b.closed.Load() {
		b.closeMu.RUnlock()
		return queue.ErrClosed
	}
	select {
	case b.ops <- o:
	case <-ctx.Done():
		b.closeMu.RUnlock()
		return ctx.Err()
	}
	b.closeMu.RUnlock()
	return <-o.done
}

// CommitStats counts durable commits since Open.
type CommitStats struct {
	// Commits is the number of times answered changes were made durable,
	// one sync each: a redo log sync (in the default mode, per group that
	// holds an operation other than a receive, delete, visibility change
	// or move, and before a checkpoint that follows groups of those; per
	// interval in interval mode), or a commit of the store while degraded.
	Commits int64
	// Ops is the number of operations those commits carried; Ops/Commits
	// is the group-commit factor.
	Ops int64
}

// ObserveWrites makes the writer call observe after each group of
// operations it applies (one transaction), with the group's size and the
// time it took: the wait that every caller in the group shared. nil stops
// it. observe runs on the writer and must be quick.
func (b *Backend) ObserveWrites(observe func(ops int, took time.Duration)) {
	if observe == nil {
		b.observe.Store(nil)
		return
	}
	b.observe.Store(&observe)
}

// ObserveCheckpoints makes the store call observe after each checkpoint,
// the commit of the redo log's changes into the store file, with the time
// it took and its error; nil stops it. observe runs beside the writer and
// must be quick.
func (b *Backend) ObserveCheckpoints(observe func(took time.Duration, err error)) {
	if observe == nil {
		b.observeCheckpoint.Store(nil)
		return
	}
	b.observeCheckpoint.Store(&observe)
}

// ObserveCorruptMessages makes the store call observe for each message
// it keeps aside as damaged (CorruptMessages); nil stops it. observe runs
// on the writer and must be quick. A message found in a group whose
// commit then fails is found, and observed, again.
func (b *Backend) ObserveCorruptMessages(observe func()) {
	if observe == nil {
		b.observeCorrupt.Store(nil)
		return
	}
	b.observeCorrupt.Store(&observe)
}

// CorruptMessages returns how many messages the store has kept aside
// since it was made because their records failed their checksum: each
// was taken out of its queue, undelivered, into the store's corrupt
// bucket, and logged at ERROR.
func (b *Backend) CorruptMessages() int64 { return b.corrupt.Load() }

// reportCorrupt counts and logs message seq of queue q, kept aside
// because its record rec is damaged (err), at most once per
// ratelog.Every: a damaged region of the disk can hold many.
func (b *Backend) reportCorrupt(q string, seq uint64, rec []byte, err error) {
	b.corrupt.Add(1)
	if observe := b.observeCorrupt.Load(); observe != nil {
		(*observe)()
	}
	id := "unknown (record too short)"
	if len(rec) >= idLen {
		id = messageID(rec) // perhaps damaged too
	}
	b.corruptLine.Do(func(skipped int64) {
		b.opts.Logger.Error("message record damaged on disk: kept aside in the store's corrupt bucket, not delivered (docs/operations.md)",
			slog.String("queue", q), slog.Uint64("seq", seq), slog.String("message_id", id), slog.Any("error", err),
			slog.Int64("suppressed_since_last_line", skipped))
	})
}

// CommitStats reports the commits made since Open.
func (b *Backend) CommitStats() CommitStats {
	return CommitStats{Commits: b.commits.Load(), Ops: b.grouped.Load()}
}

// Close stops accepting calls, commits the operations already handed to
// the writer, fails waiting receives with queue.ErrClosed, stops the
// background work and closes the store. A second Close returns nil.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	if b.closed.Load() {
		b.closeMu.Unlock()
		return nil
	}
	b.closed.Store(true)
	b.closeMu.Unlock()
	close(b.closing)
	<-b.writerDone
	<-b.sweepDone
	b.restoreGoneStore(b.lastCommitErr)
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

func (b *Backend) sweeper() {
	defer close(b.sweepDone)
	// Close ends the sweeps, cancelling one in progress.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		b.watchFile(ctx)
	}()
	periodic.Every(ctx, b.opts.SweepInterval, func(ctx context.Context) { // a negative interval never sweeps
		if _, err := b.Sweep(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, queue.ErrClosed) {
			b.opts.Logger.Warn("retention sweep", slog.Any("error", err))
		}
	})
	<-watched
}
