package embeddedqueue

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-dev/sluice/queue"
)

// Defaults for Options fields left zero.
const (
	MaxGroupCommitDefault = 512
	SweepIntervalDefault  = time.Minute
	lockTimeout           = 2 * time.Second
	fillPercent           = 0.95 // keys only grow: pack pages instead of bbolt's 50 %
)

// Options configures Open.
type Options struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now; tests inject a clock.
	Now func() time.Time
	// MaxGroupCommit bounds the operations committed in one transaction
	// (one fsync). Defaults to 512.
	MaxGroupCommit int
	// SweepInterval is how often messages past their queue's retention
	// are deleted. Defaults to one minute.
	SweepInterval time.Duration
}

var specsBucket = []byte("queues")

func msgBucket(q string) []byte   { return []byte("m/" + q) }
func stateBucket(q string) []byte { return []byte("s/" + q) }

// Backend is the embedded queue backend. Create it with Open.
type Backend struct {
	db   *bolt.DB
	opts Options
	log  *slog.Logger

	mu     sync.Mutex // guards queues and every memQueue
	queues map[string]*memQueue

	ops        chan *op
	closeMu    sync.RWMutex // held for reading while an op is handed to the writer
	closed     bool
	closing    chan struct{}
	writerDone chan struct{}
	sweepDone  chan struct{}

	commits atomic.Int64
	opsDone atomic.Int64
}

var _ queue.Backend = (*Backend)(nil)

// op is one operation applied by the writer inside a group transaction.
// run writes to tx and to the in-memory index (with b.mu held) and returns
// only storage errors; per-entry outcomes go into the op's own results.
type op struct {
	run  func(tx *bolt.Tx, now int64) error
	done chan error
}

// Open opens or creates the store at path. Only one process may hold it.
func Open(path string, opts Options) (*Backend, error) {
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.MaxGroupCommit = cmp.Or(opts.MaxGroupCommit, MaxGroupCommitDefault)
	opts.SweepInterval = cmp.Or(opts.SweepInterval, SweepIntervalDefault)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open %s: the data directory is in use by another process (one gateway or drainer per --data-dir)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	b := &Backend{
		db: db, opts: opts, log: opts.Logger,
		queues:     map[string]*memQueue{},
		ops:        make(chan *op, opts.MaxGroupCommit),
		closing:    make(chan struct{}),
		writerDone: make(chan struct{}),
		sweepDone:  make(chan struct{}),
	}
	if err := b.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("open %s: %w", path, err), db.Close())
	}
	go b.writer()
	go b.sweeper()
	return b, nil
}

// load rebuilds the in-memory index from disk. Callers hold b.mu or own b.
func (b *Backend) load() error {
	queues := map[string]*memQueue{}
	now := b.opts.Now().UnixNano()
	err := b.db.View(func(tx *bolt.Tx) error {
		specs := tx.Bucket(specsBucket)
		if specs == nil {
			return nil
		}
		return specs.ForEach(func(k, v []byte) error {
			var spec queue.QueueSpec
			if err := json.Unmarshal(v, &spec); err != nil {
				return fmt.Errorf("queue %s: corrupt spec: %w", k, err)
			}
			q := newMemQueue(spec)
			if sb := tx.Bucket(stateBucket(spec.Name)); sb != nil {
				if err := sb.ForEach(func(k, v []byte) error {
					seq := binary.BigEndian.Uint64(k)
					m := decodeState(v)
					q.msgs[seq] = m
					q.place(seq, m, now)
					q.nextSeq = max(q.nextSeq, seq+1)
					return nil
				}); err != nil {
					return err
				}
			}
			queues[spec.Name] = q
			return nil
		})
	})
	if err != nil {
		return err
	}
	// Wake anyone waiting on the old index.
	for _, old := range b.queues {
		old.wake()
	}
	b.queues = queues
	return nil
}

// state is stored as visibleAt(8) receiveCount(4) gen(4) sentAt(8).
func encodeState(m *msgState) []byte {
	v := make([]byte, 24)
	binary.BigEndian.PutUint64(v[0:], uint64(m.visibleAt))
	binary.BigEndian.PutUint32(v[8:], m.receiveCount)
	binary.BigEndian.PutUint32(v[12:], m.gen)
	binary.BigEndian.PutUint64(v[16:], uint64(m.sentAt))
	return v
}

func decodeState(v []byte) *msgState {
	return &msgState{
		visibleAt:    int64(binary.BigEndian.Uint64(v[0:])),
		receiveCount: binary.BigEndian.Uint32(v[8:]),
		gen:          binary.BigEndian.Uint32(v[12:]),
		sentAt:       int64(binary.BigEndian.Uint64(v[16:])),
	}
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

// do hands run to the writer and waits until its group has committed.
func (b *Backend) do(ctx context.Context, run func(tx *bolt.Tx, now int64) error) error {
	o := &op{run: run, done: make(chan error, 1)}
	b.closeMu.RLock()
	if b.closed {
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
	// Once handed over, the op will run: wait for its outcome even if ctx
	// ends, so a caller never mistakes a stored message for a lost one.
	return <-o.done
}

// writer applies operations in groups: everything queued while the last
// group was syncing goes into the next transaction, so concurrent callers
// share one fsync.
func (b *Backend) writer() {
	defer close(b.writerDone)
	for {
		var first *op
		select {
		case first = <-b.ops:
		case <-b.closing:
			// Close set closed before closing, so no op can arrive now.
			for {
				select {
				case o := <-b.ops:
					b.commit([]*op{o})
				default:
					return
				}
			}
		}
		group := []*op{first}
	drain:
		for len(group) < b.opts.MaxGroupCommit {
			select {
			case o := <-b.ops:
				group = append(group, o)
			default:
				break drain
			}
		}
		b.commit(group)
	}
}

func (b *Backend) commit(group []*op) {
	tx, err := b.db.Begin(true)
	if err == nil {
		now := b.opts.Now().UnixNano()
		b.mu.Lock()
		for _, o := range group {
			if err = o.run(tx, now); err != nil {
				break
			}
		}
		b.mu.Unlock()
		if err != nil {
			_ = tx.Rollback()
		} else {
			err = tx.Commit() // the fsync happens here, outside b.mu
		}
		if err != nil {
			// The index may hold changes that never reached disk: rebuild
			// it from what did.
			b.mu.Lock()
			if lerr := b.load(); lerr != nil {
				b.log.Error("reload queue index after failed commit", slog.Any("error", lerr))
			}
			b.mu.Unlock()
			b.log.Error("queue commit failed", slog.Int("ops", len(group)), slog.Any("error", err))
			err = fmt.Errorf("%w: commit: %w", queue.ErrUnavailable, err)
		}
	} else {
		err = fmt.Errorf("%w: begin: %w", queue.ErrUnavailable, err)
	}
	b.commits.Add(1)
	b.opsDone.Add(int64(len(group)))
	for _, o := range group {
		o.done <- err
	}
}

// CommitStats reports how many transactions (fsyncs) have committed and
// how many operations they carried; their ratio is the group-commit
// factor.
func (b *Backend) CommitStats() (commits, ops int64) {
	return b.commits.Load(), b.opsDone.Load()
}

func (b *Backend) sweeper() {
	defer close(b.sweepDone)
	t := time.NewTicker(b.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-b.closing:
			return
		case <-t.C:
			if n, err := b.Sweep(context.Background()); err != nil && !errors.Is(err, queue.ErrClosed) {
				b.log.Warn("retention sweep", slog.Any("error", err))
			} else if n > 0 {
				b.log.Info("retention sweep deleted expired messages", slog.Int("messages", n))
			}
		}
	}
}

// Sweep deletes every message older than its queue's retention and
// returns how many it deleted. It runs on a timer; tests call it directly.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	deleted := 0
	err := b.do(ctx, func(tx *bolt.Tx, now int64) error {
		for name, q := range b.queues {
			cutoff := now - int64(q.spec.Retention)
			for seq, m := range q.msgs {
				if m.sentAt < cutoff {
					if err := removeMsg(tx, name, seq); err != nil {
						return err
					}
					delete(q.msgs, seq)
					deleted++
				}
			}
		}
		return nil
	})
	return deleted, err
}

func removeMsg(tx *bolt.Tx, q string, seq uint64) error {
	k := seqKey(seq)
	if err := tx.Bucket(msgBucket(q)).Delete(k); err != nil {
		return err
	}
	return tx.Bucket(stateBucket(q)).Delete(k)
}

// putMsg stores a new message in q and indexes it.
func putMsg(tx *bolt.Tx, q *memQueue, body []byte, m *msgState, now int64) (uint64, error) {
	seq := q.nextSeq
	k := seqKey(seq)
	mb, sb := tx.Bucket(msgBucket(q.spec.Name)), tx.Bucket(stateBucket(q.spec.Name))
	mb.FillPercent, sb.FillPercent = fillPercent, fillPercent
	if err := mb.Put(k, body); err != nil {
		return 0, err
	}
	if err := sb.Put(k, encodeState(m)); err != nil {
		return 0, err
	}
	q.nextSeq++
	q.msgs[seq] = m
	q.place(seq, m, now)
	return seq, nil
}

// EnsureQueues creates missing queues and updates the attributes of
// existing ones.
func (b *Backend) EnsureQueues(ctx context.Context, specs []queue.QueueSpec) error {
	var invalid error
	err := b.do(ctx, func(tx *bolt.Tx, now int64) error {
		known := map[string]bool{}
		for name := range b.queues {
			known[name] = true
		}
		for _, s := range specs {
			s = s.WithDefaults()
			if err := validateSpec(s, known); err != nil {
				invalid = err
				return nil
			}
			known[s.Name] = true
		}
		root, err := tx.CreateBucketIfNotExists(specsBucket)
		if err != nil {
			return err
		}
		for _, s := range specs {
			s = s.WithDefaults()
			v, err := json.Marshal(s)
			if err != nil {
				return err
			}
			if err := root.Put([]byte(s.Name), v); err != nil {
				return err
			}
			for _, name := range [][]byte{msgBucket(s.Name), stateBucket(s.Name)} {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			if q := b.queues[s.Name]; q != nil {
				q.spec = s
			} else {
				b.queues[s.Name] = newMemQueue(s)
			}
		}
		return nil
	})
	return cmp.Or(invalid, err)
}

func validateSpec(s queue.QueueSpec, known map[string]bool) error {
	switch {
	case s.Name == "" || strings.ContainsAny(s.Name, "/\x00"):
		return fmt.Errorf("%w: queue name %q", queue.ErrInvalidArgument, s.Name)
	case s.VisibilityTimeout < 0 || s.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return fmt.Errorf("%w: queue %s: visibility timeout %s", queue.ErrInvalidArgument, s.Name, s.VisibilityTimeout)
	case s.Retention <= 0:
		return fmt.Errorf("%w: queue %s: retention %s", queue.ErrInvalidArgument, s.Name, s.Retention)
	case s.DeadLetterQueue != "" && !known[s.DeadLetterQueue]:
		return fmt.Errorf("%w: queue %s: dead-letter queue %s must be created first", queue.ErrQueueNotFound, s.Name, s.DeadLetterQueue)
	case s.DeadLetterQueue != "" && s.MaxReceiveCount < 1:
		return fmt.Errorf("%w: queue %s: max receive count must be at least 1 with a dead-letter queue", queue.ErrInvalidArgument, s.Name)
	}
	return nil
}

func (b *Backend) queueLocked(name string) (*memQueue, error) {
	q := b.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: %s", queue.ErrQueueNotFound, name)
	}
	return q, nil
}

func (b *Backend) checkQueue(name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, err := b.queueLocked(name)
	return err
}

func batchSize(op string, n int) error {
	if n == 0 {
		return fmt.Errorf("%s: %w: empty batch", op, queue.ErrInvalidArgument)
	}
	if n > queue.MaxBatch {
		return fmt.Errorf("%s: %w: %d entries, at most %d", op, queue.ErrBatchTooLarge, n, queue.MaxBatch)
	}
	return nil
}

// Send stores messages durably: it returns after their transaction is
// fsynced.
func (b *Backend) Send(ctx context.Context, p *queue.SendParams) ([]queue.SendResult, error) {
	if err := batchSize("send", len(p.Entries)); err != nil {
		return nil, err
	}
	if err := b.checkQueue(p.Queue); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	results := make([]queue.SendResult, len(p.Entries))
	ids := map[string]bool{}
	for i, e := range p.Entries {
		results[i].ID = e.ID
		switch {
		case ids[e.ID]:
			return nil, fmt.Errorf("send: %w: duplicate entry id %q", queue.ErrInvalidArgument, e.ID)
		case e.Delay < 0 || e.Delay > queue.MaxDelay:
			return nil, fmt.Errorf("send: %w: delay %s out of 0 to %s", queue.ErrInvalidArgument, e.Delay, queue.MaxDelay)
		case len(e.Body) > queue.MaxBodyBytes:
			results[i].Err = fmt.Errorf("%w: %d bytes, at most %d", queue.ErrBodyTooLarge, len(e.Body), queue.MaxBodyBytes)
		}
		ids[e.ID] = true
	}
	err := b.do(ctx, func(tx *bolt.Tx, now int64) error {
		q, err := b.queueLocked(p.Queue)
		if err != nil {
			for i := range results {
				results[i].Err = err
			}
			return nil
		}
		for i, e := range p.Entries {
			if results[i].Err != nil {
				continue
			}
			m := &msgState{sentAt: now, visibleAt: now + int64(e.Delay)}
			seq, err := putMsg(tx, q, e.Body, m, now)
			if err != nil {
				return err
			}
			results[i].MessageID = strconv.FormatUint(seq, 10)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("send %s: %w", p.Queue, err)
	}
	return results, nil
}

// Receive claims up to p.Max visible messages, waiting up to p.Wait for
// the first.
func (b *Backend) Receive(ctx context.Context, p *queue.ReceiveParams) ([]queue.Message, error) {
	switch {
	case p.Max < 1 || p.Max > queue.MaxBatch:
		return nil, fmt.Errorf("receive: %w: max %d, want 1 to %d", queue.ErrInvalidArgument, p.Max, queue.MaxBatch)
	case p.Wait < 0 || p.Wait > queue.MaxWait:
		return nil, fmt.Errorf("receive: %w: wait %s, want 0 to %s", queue.ErrInvalidArgument, p.Wait, queue.MaxWait)
	case p.VisibilityTimeout < 0 || p.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return nil, fmt.Errorf("receive: %w: visibility timeout %s", queue.ErrInvalidArgument, p.VisibilityTimeout)
	}
	deadline := b.opts.Now().Add(p.Wait)
	for {
		now := b.opts.Now()
		b.mu.Lock()
		q, err := b.queueLocked(p.Queue)
		if err != nil {
			b.mu.Unlock()
			return nil, fmt.Errorf("receive: %w", err)
		}
		ready := q.hasVisible(now.UnixNano())
		signal, next := q.signal, q.nextVisibleAt()
		b.mu.Unlock()
		if ready {
			msgs, err := b.claim(ctx, p)
			if err != nil || len(msgs) > 0 {
				return msgs, err
			}
			continue // another consumer took them; look again
		}
		if !now.Before(deadline) {
			return nil, nil
		}
		wake := deadline
		if next > 0 && time.Unix(0, next).Before(wake) {
			wake = time.Unix(0, next)
		}
		t := time.NewTimer(wake.Sub(now))
		select {
		case <-signal:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-b.closing:
			t.Stop()
			return nil, queue.ErrClosed
		}
		t.Stop()
	}
}

// claim receives visible messages in one operation, redriving those past
// the queue's max receive count to its dead-letter queue.
func (b *Backend) claim(ctx context.Context, p *queue.ReceiveParams) ([]queue.Message, error) {
	var out []queue.Message
	err := b.do(ctx, func(tx *bolt.Tx, now int64) error {
		q, err := b.queueLocked(p.Queue)
		if err != nil {
			return nil //nolint:nilerr // the queue vanished; receive nothing
		}
		vis := cmp.Or(p.VisibilityTimeout, q.spec.VisibilityTimeout)
		mb, sb := tx.Bucket(msgBucket(p.Queue)), tx.Bucket(stateBucket(p.Queue))
		for len(out) < p.Max {
			seq := q.popVisible(now)
			if seq == 0 {
				break
			}
			m := q.msgs[seq]
			k := seqKey(seq)
			body := append([]byte(nil), mb.Get(k)...)
			if dlq := b.queues[q.spec.DeadLetterQueue]; dlq != nil && int(m.receiveCount) >= q.spec.MaxReceiveCount {
				if _, err := putMsg(tx, dlq, body, &msgState{sentAt: m.sentAt, visibleAt: now}, now); err != nil {
					return err
				}
				if err := removeMsg(tx, p.Queue, seq); err != nil {
					return err
				}
				delete(q.msgs, seq)
				continue
			}
			m.receiveCount++
			m.gen++
			m.visibleAt = now + int64(vis)
			if err := sb.Put(k, encodeState(m)); err != nil {
				return err
			}
			q.place(seq, m, now)
			out = append(out, queue.Message{
				MessageID:     strconv.FormatUint(seq, 10),
				ReceiptHandle: receipt(seq, m.gen),
				Body:          body,
				ReceiveCount:  int(m.receiveCount),
				SentAt:        time.Unix(0, m.sentAt),
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("receive %s: %w", p.Queue, err)
	}
	return out, nil
}

// A receipt handle names one receive of one message: seq.gen in hex. A
// later receive bumps gen, which invalidates every earlier handle.
func receipt(seq uint64, gen uint32) string {
	return strconv.FormatUint(seq, 16) + "." + strconv.FormatUint(uint64(gen), 16)
}

func parseReceipt(h string) (uint64, uint32, bool) {
	s, g, ok := strings.Cut(h, ".")
	if !ok {
		return 0, 0, false
	}
	seq, err1 := strconv.ParseUint(s, 16, 64)
	gen, err2 := strconv.ParseUint(g, 16, 32)
	return seq, uint32(gen), err1 == nil && err2 == nil && seq > 0
}

// held returns the message a receipt names if the receipt is still the
// latest receive of it.
func held(q *memQueue, h string) (uint64, *msgState, error) {
	seq, gen, ok := parseReceipt(h)
	if !ok {
		return 0, nil, fmt.Errorf("%w: malformed receipt %q", queue.ErrReceiptInvalid, h)
	}
	m := q.msgs[seq]
	if m == nil || m.gen != gen || m.receiveCount == 0 {
		return 0, nil, fmt.Errorf("%w: message deleted or received again since", queue.ErrReceiptInvalid)
	}
	return seq, m, nil
}

// Delete removes messages. A receipt works until the message is received
// again, as on SQS, even after its visibility timeout has passed.
func (b *Backend) Delete(ctx context.Context, p *queue.DeleteParams) ([]error, error) {
	if err := batchSize("delete", len(p.ReceiptHandles)); err != nil {
		return nil, err
	}
	if err := b.checkQueue(p.Queue); err != nil {
		return nil, fmt.Errorf("delete: %w", err)
	}
	results := make([]error, len(p.ReceiptHandles))
	err := b.do(ctx, func(tx *bolt.Tx, now int64) error {
		q, err := b.queueLocked(p.Queue)
		if err != nil {
			return nil //nolint:nilerr // checked above; a vanished queue deletes nothing
		}
		for i, h := range p.ReceiptHandles {
			seq, _, err := held(q, h)
			if err != nil {
				results[i] = err
				continue
			}
			if err := removeMsg(tx, p.Queue, seq); err != nil {
				return err
			}
			delete(q.msgs, seq)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delete %s: %w", p.Queue, err)
	}
	return results, nil
}

// ChangeVisibility extends or ends leases. Unlike Delete it needs the
// lease to be current: a message whose timeout has passed is no longer in
// flight, as on SQS.
func (b *Backend) ChangeVisibility(ctx context.Context, p *queue.ChangeVisibilityParams) ([]error, error) {
	if err := batchSize("change visibility", len(p.Changes)); err != nil {
		return nil, err
	}
	for _, c := range p.Changes {
		if c.Timeout < 0 || c.Timeout > queue.MaxVisibilityTimeout {
			return nil, fmt.Errorf("change visibility: %w: timeout %s", queue.ErrInvalidArgument, c.Timeout)
		}
	}
	if err := b.checkQueue(p.Queue); err != nil {
		return nil, fmt.Errorf("change visibility: %w", err)
	}
	results := make([]error, len(p.Changes))
	err := b.do(ctx, func(tx *bolt.Tx, now int64) error {
		q, err := b.queueLocked(p.Queue)
		if err != nil {
			return nil //nolint:nilerr // checked above
		}
		sb := tx.Bucket(stateBucket(p.Queue))
		for i, c := range p.Changes {
			seq, m, err := held(q, c.ReceiptHandle)
			if err == nil && m.visibleAt <= now {
				err = fmt.Errorf("%w: lease expired", queue.ErrReceiptInvalid)
			}
			if err != nil {
				results[i] = err
				continue
			}
			m.visibleAt = now + int64(c.Timeout)
			if err := sb.Put(seqKey(seq), encodeState(m)); err != nil {
				return err
			}
			q.place(seq, m, now)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("change visibility %s: %w", p.Queue, err)
	}
	return results, nil
}

// Stats counts each queue's messages from the in-memory index.
func (b *Backend) Stats(_ context.Context, p *queue.StatsParams) ([]queue.Stats, error) {
	b.closeMu.RLock()
	closed := b.closed
	b.closeMu.RUnlock()
	if closed {
		return nil, queue.ErrClosed
	}
	now := b.opts.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]queue.Stats, len(p.Queues))
	for i, name := range p.Queues {
		q, err := b.queueLocked(name)
		if err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		out[i] = q.stats(name, now)
	}
	return out, nil
}

// Close finishes queued operations, stops the background work and closes
// the store. Later calls return ErrClosed; calling Close twice is safe.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return nil
	}
	b.closed = true
	b.closeMu.Unlock()
	close(b.closing)
	<-b.writerDone
	<-b.sweepDone
	if err := b.db.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}
