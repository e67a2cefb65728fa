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
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-dev/sluice/internal/periodic"
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
	// SyncInterval chooses when a change is made durable. Zero, the
	// default, fsyncs every commit before its callers are answered: an
	// answered call survives a power loss. A positive interval answers a
	// call once its changes are written to the redo log in the operating
	// system (they survive a crash of the process) and fsyncs once per
	// interval: a power loss can lose the calls answered in the last
	// interval, plus the sync under way.
	SyncInterval time.Duration
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
	maxSize     int    // bbolt MaxSize: a full disk at this file size
	beforeGroup func() // run by the writer after taking a group's first operation
}

// Backend is the embedded queue.Backend. Create it with Open; it is safe
// for concurrent use.
type Backend struct {
	db    *bolt.DB
	opts  Options
	knobs knobs

	mu     sync.Mutex // guards queues and every memQueue in it, and keys
	queues map[string]*memQueue
	keys   map[string]keyRecord // unexpired idempotency keys (keys.go)

	ops        chan *op
	closeMu    sync.RWMutex // read-held while handing an op to the writer
	closed     atomic.Bool
	closing    chan struct{}
	writerDone chan struct{}
	sweepDone  chan struct{}

	commits  atomic.Int64
	grouped  atomic.Int64
	observe  atomic.Pointer[func(ops int, took time.Duration)]
	groupBuf []*op // the writer's

	// Interval mode (Options.SyncInterval > 0); the writer's. tx is the
	// open transaction, pending says it holds logged changes not yet
	// committed, epoch is the store's log epoch. After a failed commit
	// the backend is degraded: each group commits at once, as in the
	// default mode, until one succeeds. broken is set when the
	// transaction could not be rebuilt from the log; every call fails.
	log      *redoLog
	tx       *bolt.Tx
	pending  bool
	epoch    uint64
	degraded bool
	broken   error
	logBuf   []byte
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
}

// Open opens or creates the store at path, a file in a data directory
// that only this process may use.
func Open(path string, opts Options) (*Backend, error) {
	return open(path, opts, knobs{})
}

func open(path string, opts Options, k knobs) (*Backend, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        opts.LockTimeout,
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: true,
		MaxSize:        k.maxSize,
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
	}
	if err := b.init(path + ".wal"); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", path, err), db.Close())
	}
	go b.writer()
	go b.sweeper()
	return b, nil
}

// init checks or stamps the file format, replays the redo log and builds
// the index.
func (b *Backend) init(logPath string) error {
	err := b.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		if meta == nil {
			if tx.Bucket(queuesBucket) != nil {
				return errors.New("store written by an older sluice with another format; move the data directory aside")
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
		if got := string(meta.Get(formatKey)); got != format {
			return fmt.Errorf("store format %q, this build reads %q", got, format)
		}
		// Added to format 1 without a new format: older builds ignore them.
		for _, name := range [][]byte{keysBucket, keyExpiryBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := b.recoverLog(logPath); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loadLocked()
}

// recoverLog commits what the redo log of an earlier interval-mode run
// holds beyond the store, then opens the log in interval mode or removes
// it in the default mode.
func (b *Backend) recoverLog(path string) error {
	data, err := readLogFile(path)
	if err != nil {
		return err
	}
	err = b.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(metaBucket)
		if v := meta.Get(logEpochKey); len(v) == 8 {
			b.epoch = binary.BigEndian.Uint64(v)
		}
		n, err := replayLog(tx, data, b.epoch)
		if err != nil || n == 0 {
			return err
		}
		b.opts.Logger.Info("replayed the redo log", slog.Int("num_records", n))
		b.epoch++
		return meta.Put(logEpochKey, binary.BigEndian.AppendUint64(nil, b.epoch))
	})
	if err != nil {
		return fmt.Errorf("replay redo log: %w", err)
	}
	if b.opts.SyncInterval == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove redo log: %w", err)
		}
		return nil
	}
	b.log, err = openLog(path)
	return err
}

// loadLocked rebuilds the in-memory index from disk, scanning only the
// small state records and the unexpired idempotency keys. Callers hold
// b.mu or own b.
func (b *Backend) loadLocked() error {
	return b.db.View(b.loadFromLocked)
}

// loadFromLocked rebuilds the index from what tx sees.
func (b *Backend) loadFromLocked(tx *bolt.Tx) error {
	queues := map[string]*memQueue{}
	now := b.opts.Clock().UnixNano()
	err := tx.Bucket(queuesBucket).ForEach(func(name, v []byte) error {
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
		if err := sb.ForEach(func(k, v []byte) error {
			m, err := decodeState(v)
			if err != nil || len(k) != 8 {
				return fmt.Errorf("queue %s: message %x: bad state record", name, k)
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
		return err
	}
	keys, err := loadKeys(tx, now)
	if err != nil {
		return err
	}
	for _, old := range b.queues {
		old.wake() // waiters re-check against the new index
	}
	b.queues, b.keys = queues, keys
	return nil
}

// do hands apply to the writer and waits until its group has committed.
// Once handed over an operation runs to the end even if ctx ends, so a
// caller never takes a stored message for a lost one.
func (b *Backend) do(ctx context.Context, bytes int, apply func(w *writeTx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{apply: apply, bytes: bytes, done: make(chan error, 1)}
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

// writer applies operations in groups: it takes the first waiting
// operation and whatever else is queued behind it, so callers that arrive
// while a commit is syncing share the next one. There is no linger.
func (b *Backend) writer() {
	defer close(b.writerDone)
	var tick <-chan time.Time
	if b.log != nil {
		t := time.NewTicker(b.opts.SyncInterval)
		defer t.Stop()
		tick = t.C
		defer b.closeLog()
	}
	for {
		select {
		case o := <-b.ops:
			b.commit(b.gather(o))
		case <-tick:
			if err := b.flush(); err != nil {
				b.opts.Logger.Error("interval commit failed; committing every call until one succeeds", slog.Any("error", err))
			}
		case <-b.closing:
			// Close has stopped new hand-overs; finish what was accepted.
			for {
				select {
				case o := <-b.ops:
					b.commit(b.gather(o))
				default:
					return
				}
			}
		}
	}
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

func (b *Backend) commit(group []*op) {
	start := time.Now()
	err := b.applyGroup(group)
	if observe := b.observe.Load(); observe != nil && err == nil {
		(*observe)(len(group), time.Since(start))
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", queue.ErrUnavailable, err)
	}
	for i, o := range group {
		o.done <- err
		group[i] = nil
	}
	b.groupBuf = group[:0]
}

// applyGroup runs a group in one transaction. A storage error rolls the
// transaction back and rebuilds the index, which the group's operations
// had already changed, from what is on disk.
func (b *Backend) applyGroup(group []*op) error {
	if b.log != nil {
		return b.applyLogged(group)
	}
	tx, err := b.db.Begin(true)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	w := &writeTx{tx: tx, now: b.opts.Clock().UnixNano()}
	b.mu.Lock()
	for _, o := range group {
		if err = o.apply(w); err != nil {
			break
		}
	}
	b.mu.Unlock()
	switch {
	case err == nil && !w.dirty:
		return tx.Rollback() // nothing to make durable
	case err == nil:
		if err = tx.Commit(); err == nil { // the fsync, outside b.mu
			b.commits.Add(1)
			b.grouped.Add(int64(len(group)))
			return nil
		}
	default:
		_ = tx.Rollback()
	}
	b.mu.Lock()
	lerr := b.loadLocked()
	b.mu.Unlock()
	if lerr != nil {
		// Not returned to anyone else: the callers get err.
		b.opts.Logger.Error("rebuild queue index after a failed commit", slog.Any("error", lerr))
	}
	return fmt.Errorf("commit: %w", err)
}

// CommitStats counts durable commits since Open.
type CommitStats struct {
	// Commits is the number of transactions committed, one fsync each.
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
	periodic.Every(ctx, b.opts.SweepInterval, func(ctx context.Context) { // a negative interval never sweeps
		if _, err := b.Sweep(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, queue.ErrClosed) {
			b.opts.Logger.Warn("retention sweep", slog.Any("error", err))
		}
	})
}
