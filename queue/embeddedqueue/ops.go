package embeddedqueue

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// sweepChunk bounds the messages one retention operation deletes, so a
// large expiry never holds the writer for long.
const sweepChunk = 4096

// redriveBytes bounds the changes one receive logs. A redrive copies the
// message's body into the dead-letter queue; a receive that finds many
// messages past their max receive count at once stops there, and the
// next operation goes on.
const redriveBytes = 4 << 20

// full reports whether an operation whose changes began at start in the
// group's record has logged its most: redriveBytes of its own, or the
// group's record maxGroupBytes. A receive is handed to the writer with
// no bytes, so the gathering of a group does not count its redrives; it
// stops itself, having taken at least one message.
func (w *writeTx) full(start int) bool {
	return len(w.log)-start >= redriveBytes || len(w.log) >= maxGroupBytes
}

// EnsureQueues creates the queues that do not exist and updates the
// attributes of those that do; specs equal to the stored ones cost no
// write. A dead-letter queue must exist already or be in the same call.
func (b *Backend) EnsureQueues(ctx context.Context, specs []queue.QueueSpec) error {
	specs = slices.Clone(specs)
	for i := range specs {
		specs[i] = specs[i].WithDefaults()
	}
	if b.closed.Load() {
		return fmt.Errorf("ensure queues: %w", queue.ErrClosed)
	}
	b.mu.Lock()
	changed, err := b.checkSpecsLocked(specs)
	b.mu.Unlock()
	if err != nil {
		return fmt.Errorf("ensure queues: %w", err)
	}
	if !changed {
		return nil
	}
	var invalid error
	err = b.do(ctx, 0, func(w *writeTx) error {
		// Checked again: another call may have changed the queues since.
		if _, err := b.checkSpecsLocked(specs); err != nil {
			invalid = err
			return nil
		}
		root := w.tx.Bucket(queuesBucket)
		for _, s := range specs {
			q := b.queues[s.Name]
			if q != nil && q.spec == s {
				continue
			}
			id := newQueueID()
			if q != nil {
				id = q.id
			}
			v, err := encodeSpec(s, id)
			if err != nil {
				return err
			}
			if err := w.put(root, queuesBucket, []byte(s.Name), v); err != nil {
				return err
			}
			for _, name := range [][]byte{msgBucket(s.Name), stateBucket(s.Name)} {
				if err := w.createBucket(name); err != nil {
					return err
				}
			}
			if q != nil {
				q.spec = s
			} else {
				b.queues[s.Name] = newMemQueue(s, id)
			}
		}
		return nil
	})
	if err = cmp.Or(invalid, err); err != nil {
		return fmt.Errorf("ensure queues: %w", err)
	}
	return nil
}

// checkSpecsLocked validates specs (with defaults applied) against the
// existing queues and reports whether any differs from what is stored.
func (b *Backend) checkSpecsLocked(specs []queue.QueueSpec) (bool, error) {
	inCall := map[string]queue.QueueSpec{}
	changed := false
	for _, s := range specs {
		if prev, dup := inCall[s.Name]; dup && prev != s {
			return false, fmt.Errorf("%w: queue %s given twice with different attributes", queue.ErrInvalidArgument, s.Name)
		}
		inCall[s.Name] = s
		if q := b.queues[s.Name]; q == nil || q.spec != s {
			changed = true
		}
	}
	for _, s := range specs {
		switch {
		case s.Name == "":
			return false, fmt.Errorf("%w: empty queue name", queue.ErrInvalidArgument)
		case s.VisibilityTimeout < 0 || s.VisibilityTimeout > queue.MaxVisibilityTimeout:
			return false, fmt.Errorf("%w: queue %s: visibility timeout %s, want 0 to %s", queue.ErrInvalidArgument, s.Name, s.VisibilityTimeout, queue.MaxVisibilityTimeout)
		case s.Retention < 0:
			return false, fmt.Errorf("%w: queue %s: retention %s", queue.ErrInvalidArgument, s.Name, s.Retention)
		case s.MaxReceiveCount < 0:
			return false, fmt.Errorf("%w: queue %s: max receive count %d", queue.ErrInvalidArgument, s.Name, s.MaxReceiveCount)
		case s.DeadLetterQueue == "":
		case s.DeadLetterQueue == s.Name:
			return false, fmt.Errorf("%w: queue %s is its own dead-letter queue", queue.ErrInvalidArgument, s.Name)
		case b.queues[s.DeadLetterQueue] == nil && !hasName(inCall, s.DeadLetterQueue):
			return false, fmt.Errorf("%w: queue %s: dead-letter queue %s", queue.ErrQueueNotFound, s.Name, s.DeadLetterQueue)
		case s.MaxReceiveCount < 1:
			return false, fmt.Errorf("%w: queue %s: a dead-letter queue needs a max receive count of at least 1", queue.ErrInvalidArgument, s.Name)
		}
	}
	return changed, nil
}

func hasName(m map[string]queue.QueueSpec, name string) bool {
	_, ok := m[name]
	return ok
}

var _ queue.Lister = (*Backend)(nil)

// ListQueues returns, sorted, the names of the queues whose names start
// with prefix.
func (b *Backend) ListQueues(_ context.Context, prefix string) ([]string, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var names []string
	for name := range b.queues {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// checkQueue reports ErrClosed, a broken backend or ErrQueueNotFound
// before any work.
func (b *Backend) checkQueue(name string) error {
	if err := b.usable(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queues[name] == nil {
		return fmt.Errorf("%w: %s", queue.ErrQueueNotFound, name)
	}
	return nil
}

func checkBatch(n int) error {
	if n == 0 {
		return fmt.Errorf("%w: empty batch", queue.ErrInvalidArgument)
	}
	if n > queue.MaxBatch {
		return fmt.Errorf("%w: %d entries, at most %d", queue.ErrBatchTooLarge, n, queue.MaxBatch)
	}
	return nil
}

// Send stores messages, and the idempotency keys of entries that carry
// one, and returns once they are fsynced, or in interval mode written to
// the redo log. An entry whose body is too large fails alone; a bad delay
// or a duplicate entry ID fails the call.
func (b *Backend) Send(ctx context.Context, p *queue.SendParams) ([]queue.SendResult, error) {
	results, errs := b.SendMany(ctx, []*queue.SendParams{p})
	return results[0], errs[0]
}

var _ queue.MultiSender = (*Backend)(nil)

// SendMany does what Send does for each of sends, in one operation of
// the writer and so in one commit (queue.MultiSender). A SendParams that
// Send would refuse as a whole fails alone; a failed commit fails all.
func (b *Backend) SendMany(ctx context.Context, sends []*queue.SendParams) ([][]queue.SendResult, []error) {
	results := make([][]queue.SendResult, len(sends))
	errs := make([]error, len(sends))
	var todo []*preparedSend
	size := 0
	if err := b.goneErr(); err != nil {
		for i, p := range sends {
			errs[i] = fmt.Errorf("send %s: %w", p.Queue, err)
		}
		return results, errs
	}
	for i, p := range sends {
		ps, err := b.prepareSend(p)
		if err != nil {
			errs[i] = fmt.Errorf("send %s: %w", p.Queue, err)
			continue
		}
		results[i] = ps.results
		if ps.size > 0 {
			ps.index = i
			todo = append(todo, ps)
			size += ps.size
		}
	}
	if len(todo) == 0 {
		return results, errs
	}
	keys := keyRecords(todo)
	err := b.doBlind(ctx, size, func(w *writeTx) error {
		var err error
		keys, err = b.applySends(w, todo, keys)
		return err
	})
	if err == nil {
		b.publishKeys(keys)
	}
	for _, ps := range todo {
		switch {
		case err != nil:
			results[ps.index], errs[ps.index] = nil, fmt.Errorf("send %s: %w", ps.p.Queue, err)
		case ps.missing:
			results[ps.index], errs[ps.index] = nil, fmt.Errorf("send %s: %w", ps.p.Queue, queue.ErrQueueNotFound)
		}
	}
	return results, errs
}

// preparedSend is one SendParams checked and turned into records, ready
// for the writer.
type preparedSend struct {
	p       *queue.SendParams
	index   int // in SendMany's sends
	results []queue.SendResult
	recs    [][]byte // nil for an entry that failed alone
	size    int      // of recs; zero if none is stored
	missing bool     // set by apply: the queue was gone
}

// prepareSend checks p as Send does and makes its records.
func (b *Backend) prepareSend(p *queue.SendParams) (*preparedSend, error) {
	if err := checkBatch(len(p.Entries)); err != nil {
		return nil, err
	}
	ps := &preparedSend{p: p, results: make([]queue.SendResult, len(p.Entries))}
	stored := 0
	for i, e := range p.Entries {
		switch {
		case slices.ContainsFunc(p.Entries[:i], func(o queue.SendEntry) bool { return o.ID == e.ID }):
			return nil, fmt.Errorf("%w: duplicate entry id %q", queue.ErrInvalidArgument, e.ID)
		case e.Delay < 0 || e.Delay > queue.MaxDelay:
			return nil, fmt.Errorf("%w: delay %s, want 0 to %s", queue.ErrInvalidArgument, e.Delay, queue.MaxDelay)
		}
		ps.results[i].ID = e.ID
		if len(e.Body) > queue.MaxBodyBytes {
			ps.results[i].Err = fmt.Errorf("%w: %d bytes, at most %d", queue.ErrBodyTooLarge, len(e.Body), queue.MaxBodyBytes)
			continue
		}
		stored++
	}
	ps.recs = newRecords(p.Entries, ps.results)
	if b.knobs.legacyRecords {
		for i, rec := range ps.recs {
			if rec != nil {
				ps.recs[i] = rec[:len(rec)-crcLen]
			}
		}
	}
	// The message IDs of the send share one string (one allocation).
	var ids strings.Builder
	ids.Grow(stored * messageIDLen)
	for _, rec := range ps.recs {
		if rec != nil {
			var buf [messageIDLen]byte
			ids.Write(appendMessageID(buf[:0], rec))
			ps.size += len(rec)
		}
	}
	text := ids.String()
	for i, rec := range ps.recs {
		if rec != nil {
			ps.results[i].MessageID, text = text[:messageIDLen], text[messageIDLen:]
		}
	}
	if err := b.checkQueue(p.Queue); err != nil {
		return nil, err
	}
	return ps, nil
}

// keyRecords makes the key records of the stored entries of sends,
// prepared for one operation: one for each run of keys that expire
// together, named by the message id of its first. A gateway's batch of
// 100 keyed jobs, sent as 10 sends, costs the writer one record, not 10.
// (A record per send, merged into one by copying, cost a few percent of
// a keyed SubmitBatch's CPU.)
func keyRecords(sends []*preparedSend) []keyRecord {
	var out []keyRecord
	var keys []*queue.StoredKey // of a run expiring together
	var first string            // the message id of its first
	for _, ps := range sends {
		for i, e := range ps.p.Entries {
			if ps.recs[i] == nil || e.Key == nil {
				continue
			}
			if len(keys) > 0 && e.Key.Expires.UnixNano() != keys[0].Expires.UnixNano() {
				out = append(out, newKeyRecord(keys, first))
				keys = keys[:0]
			}
			if len(keys) == 0 {
				first = ps.results[i].MessageID
			}
			keys = append(keys, e.Key)
		}
	}
	if len(keys) > 0 {
		out = append(out, newKeyRecord(keys, first))
	}
	return out
}

// applySends stores sends, prepared for one operation, in w, and keys,
// their key records (keyRecords), and returns the key records it stored;
// the writer holds b.mu. If a queue is gone, the keys of the sends stored
// get records of their own instead.
func (b *Backend) applySends(w *writeTx, sends []*preparedSend, keys []keyRecord) ([]keyRecord, error) {
	for _, ps := range sends {
		if err := ps.applyMessages(b, w); err != nil {
			return nil, err
		}
	}
	if slices.ContainsFunc(sends, func(ps *preparedSend) bool { return ps.missing }) {
		// Gone with a failed commit's EnsureQueues (rare): keys records
		// keys of messages that were not stored.
		keys = keyRecords(slices.DeleteFunc(slices.Clone(sends), func(ps *preparedSend) bool { return ps.missing }))
	}
	for i := range keys {
		if err := w.putKeys(&keys[i]); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// applyMessages stores the records of ps in w, not its keys.
func (ps *preparedSend) applyMessages(b *Backend, w *writeTx) error {
	q := b.queues[ps.p.Queue]
	if ps.missing = q == nil; ps.missing {
		return nil // gone with a failed commit's EnsureQueues
	}
	for i, e := range ps.p.Entries {
		if ps.recs[i] == nil {
			continue
		}
		m := msgState{sentAt: w.now, visibleAt: w.now + int64(e.Delay)}
		if err := w.add(q, ps.recs[i], m); err != nil {
			return err
		}
	}
	return nil
}

var _ queue.Mover = (*Backend)(nil)

// Move stores each entry in p.To and deletes its original from p.From in
// one operation of the writer, and so in one commit (queue.Mover). An
// entry whose receipt no longer holds its message is refused alone and
// nothing is sent for it.
func (b *Backend) Move(ctx context.Context, p *queue.MoveParams) ([]queue.SendResult, error) {
	send := &queue.SendParams{Queue: p.To, Entries: make([]queue.SendEntry, len(p.Entries))}
	for i, e := range p.Entries {
		send.Entries[i] = e.SendEntry
		send.Entries[i].Key = nil
	}
	ps, err := b.prepareSend(send)
	if err == nil {
		err = b.checkQueue(p.From)
	}
	if err != nil {
		return nil, fmt.Errorf("move %s to %s: %w", p.From, p.To, err)
	}
	err = b.doLazy(ctx, ps.size, func(w *writeTx) error {
		from, to := b.queues[p.From], b.queues[p.To]
		if ps.missing = from == nil || to == nil; ps.missing {
			return nil // gone with a failed commit's EnsureQueues
		}
		for i, e := range p.Entries {
			if ps.recs[i] == nil {
				continue
			}
			seq, _, err := held(from, e.ReceiptHandle)
			if err != nil {
				ps.results[i] = queue.SendResult{ID: e.ID, Err: err}
				continue
			}
			if err := w.add(to, ps.recs[i], msgState{sentAt: w.now, visibleAt: w.now + int64(e.Delay)}); err != nil {
				return err
			}
			if err := w.remove(from, seq); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("move %s to %s: %w", p.From, p.To, err)
	case ps.missing:
		return nil, fmt.Errorf("move %s to %s: %w", p.From, p.To, queue.ErrQueueNotFound)
	}
	return ps.results, nil
}

// Receive claims up to p.Max visible messages, oldest sequence first,
// waiting up to p.Wait for the first. Messages past the queue's max
// receive count are moved to its dead-letter queue on the way.
func (b *Backend) Receive(ctx context.Context, p *queue.ReceiveParams) ([]queue.Message, error) {
	return b.receive(ctx, p, headPicker{})
}

// ReceiveSentAfter is Receive restricted to the messages stored in the
// queue at or after after (queue.FreshReceiver): the visible ones among
// them, lowest sequence first. Older visible messages stay where they
// are. It finds the first such message without reading the older ones
// again: the queue remembers where the last call's bound ended (a
// backlog of millions is passed over once, in steps of
// freshScanStep). A bound less than a minute (freshRewind) earlier than
// the last call's is taken as that one, so messages sent between the two
// are left to Receive; one earlier by more starts the search over.
func (b *Backend) ReceiveSentAfter(ctx context.Context, p *queue.ReceiveParams, after time.Time) ([]queue.Message, error) {
	return b.receive(ctx, p, &freshPicker{after: after.UnixNano()})
}

// receive is Receive with the messages chosen by pick.
func (b *Backend) receive(ctx context.Context, p *queue.ReceiveParams, pick picker) ([]queue.Message, error) {
	switch {
	case p.Max < 1 || p.Max > queue.MaxBatch:
		return nil, fmt.Errorf("receive %s: %w: max %d, want 1 to %d", p.Queue, queue.ErrInvalidArgument, p.Max, queue.MaxBatch)
	case p.Wait < 0 || p.Wait > queue.MaxWait:
		return nil, fmt.Errorf("receive %s: %w: wait %s, want 0 to %s", p.Queue, queue.ErrInvalidArgument, p.Wait, queue.MaxWait)
	case p.VisibilityTimeout < 0 || p.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return nil, fmt.Errorf("receive %s: %w: visibility timeout %s, want 0 to %s", p.Queue, queue.ErrInvalidArgument, p.VisibilityTimeout, queue.MaxVisibilityTimeout)
	}
	deadline := time.Now().Add(p.Wait)
	for {
		if err := b.usable(); err != nil {
			return nil, fmt.Errorf("receive %s: %w", p.Queue, err)
		}
		b.mu.Lock()
		q := b.queues[p.Queue]
		if q == nil {
			b.mu.Unlock()
			return nil, fmt.Errorf("receive %s: %w", p.Queue, queue.ErrQueueNotFound)
		}
		now := b.opts.Clock().UnixNano()
		ready, passing := pick.has(q, now)
		if passing {
			b.mu.Unlock()
			// A search past old messages goes on, the lock let go
			// between its steps, unless the caller or the backend is
			// done: a search that never ended held a stopping gateway
			// for 12 minutes (found in a scale test).
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("receive %s: %w", p.Queue, ctx.Err())
			case <-b.closing:
				return nil, fmt.Errorf("receive %s: %w", p.Queue, queue.ErrClosed)
			default:
			}
			continue
		}
		wait := time.Until(deadline)
		var signal <-chan struct{}
		if !ready && wait > 0 {
			signal = q.waiter()
			if next, ok := q.nextVisibleAt(); ok {
				wait = min(wait, time.Duration(next-now))
			}
		}
		b.mu.Unlock()

		switch {
		case ready:
			msgs, err := b.claim(ctx, p, pick)
			if err != nil || len(msgs) > 0 {
				return msgs, err
			}
			continue // others took them first, or all were redriven
		case wait <= 0 && signal == nil:
			return []queue.Message{}, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-signal:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("receive %s: %w", p.Queue, ctx.Err())
		case <-b.closing:
			t.Stop()
			return nil, fmt.Errorf("receive %s: %w", p.Queue, queue.ErrClosed)
		}
		t.Stop()
	}
}

// claim takes visible messages in one operation: it bumps each one's
// receive count and generation and hides it, or, past the max receive
// count, moves it to the dead-letter queue in the same transaction. It
// may return fewer than p.Max, none at all, when its redrives fill it
// (writeTx.full); Receive then claims again.
func (b *Backend) claim(ctx context.Context, p *queue.ReceiveParams, pick picker) ([]queue.Message, error) {
	var out []queue.Message
	err := b.doLazy(ctx, 0, func(w *writeTx) error {
		q := b.queues[p.Queue]
		if q == nil {
			return nil // gone with a failed commit's EnsureQueues
		}
		pick.begin() // an operation held back for the store runs again
		vis := int64(cmp.Or(p.VisibilityTimeout, q.spec.VisibilityTimeout))
		dlq := b.queues[q.spec.DeadLetterQueue]
		changed := false
		start := len(w.log) // of this operation's changes in the group's record
		for len(out) < p.Max && (!changed || !w.full(start)) {
			if w.tx == nil { // a checkpoint is committing: memory only
				if seq, ok := pick.peek(q, w.now); ok {
					if _, inMemory := q.record(seq); !inMemory {
						if !changed {
							return errNeedsStore
						}
						break
					}
				}
			}
			changed = true
			seq, ok := pick.pop(q, w.now)
			if !ok {
				break
			}
			m, _ := q.msgs.get(seq)
			rec, err := w.record(q, seq)
			if err != nil {
				return err
			}
			checksummed := seq >= q.crcFrom
			body, bad := recordBody(rec, checksummed)
			if bad != nil {
				// Neither delivered nor redriven (the dead-letter queue
				// would seal the damage with a checksum of its own), and
				// out of the way of the messages behind it.
				if err := w.quarantine(q, seq, rec); err != nil {
					return err
				}
				b.reportCorrupt(q.spec.Name, seq, rec, bad)
				continue
			}
			if dlq != nil && int(m.receives) >= q.spec.MaxReceiveCount {
				if !checksummed { // written before the upgrade: every record written now has one
					rec = appendChecksum(rec, rec)
				}
				// SQS keeps the original enqueue time, so retention and
				// OldestAge count from the first send.
				if err := w.add(dlq, rec, msgState{sentAt: m.sentAt, visibleAt: w.now}); err != nil {
					return err
				}
				if err := w.remove(q, seq); err != nil {
					return err
				}
				continue
			}
			m.receives++
			m.gen++
			m.visibleAt = w.now + vis
			if m, err = w.update(q, seq, m); err != nil {
				return err
			}
			out = append(out, queue.Message{
				MessageID:     messageID(rec),
				ReceiptHandle: receipt{queueID: q.id, seq: seq, gen: m.gen}.String(),
				Body:          body,
				ReceiveCount:  int(m.receives),
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

// held returns the message a receipt names if the receipt is from this
// queue and is still the message's latest receive.
func held(q *memQueue, h string) (uint64, msgState, error) {
	r, ok := parseReceipt(h)
	switch {
	case !ok:
		return 0, msgState{}, fmt.Errorf("%w: malformed receipt handle", queue.ErrReceiptInvalid)
	case r.queueID != q.id:
		return 0, msgState{}, fmt.Errorf("%w: receipt handle of another queue", queue.ErrReceiptInvalid)
	}
	m, ok := q.msgs.get(r.seq)
	if !ok || m.receives == 0 || m.gen != r.gen {
		return 0, msgState{}, fmt.Errorf("%w: message deleted, redriven or received again since", queue.ErrReceiptInvalid)
	}
	return r.seq, m, nil
}

// Delete removes received messages. As on SQS, a handle whose lease has
// expired still deletes the message as long as nobody has received it
// since; once someone has, the handle is refused.
func (b *Backend) Delete(ctx context.Context, p *queue.DeleteParams) ([]error, error) {
	if err := checkBatch(len(p.ReceiptHandles)); err != nil {
		return nil, fmt.Errorf("delete %s: %w", p.Queue, err)
	}
	if err := b.checkQueue(p.Queue); err != nil {
		return nil, fmt.Errorf("delete %s: %w", p.Queue, err)
	}
	results := make([]error, len(p.ReceiptHandles))
	for i := range results {
		results[i] = queue.ErrReceiptInvalid // until the operation runs
	}
	err := b.doLazy(ctx, 0, func(w *writeTx) error {
		q := b.queues[p.Queue]
		if q == nil {
			return nil // gone with a failed commit's EnsureQueues
		}
		for i, h := range p.ReceiptHandles {
			seq, _, err := held(q, h)
			if err != nil {
				results[i] = err
				continue
			}
			if err := w.remove(q, seq); err != nil {
				return err
			}
			results[i] = nil
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delete %s: %w", p.Queue, err)
	}
	return results, nil
}

// ChangeVisibility sets the remaining visibility timeout of received
// messages; zero makes them visible at once. Unlike Delete it needs a
// current lease: once the timeout has passed the message is no longer in
// flight (SQS's MessageNotInflight) and the handle is refused.
func (b *Backend) ChangeVisibility(ctx context.Context, p *queue.ChangeVisibilityParams) ([]error, error) {
	if err := checkBatch(len(p.Changes)); err != nil {
		return nil, fmt.Errorf("change visibility %s: %w", p.Queue, err)
	}
	for _, c := range p.Changes {
		if c.Timeout < 0 || c.Timeout > queue.MaxVisibilityTimeout {
			return nil, fmt.Errorf("change visibility %s: %w: timeout %s, want 0 to %s", p.Queue, queue.ErrInvalidArgument, c.Timeout, queue.MaxVisibilityTimeout)
		}
	}
	if err := b.checkQueue(p.Queue); err != nil {
		return nil, fmt.Errorf("change visibility %s: %w", p.Queue, err)
	}
	results := make([]error, len(p.Changes))
	for i := range results {
		results[i] = queue.ErrReceiptInvalid // until the operation runs
	}
	err := b.doLazy(ctx, 0, func(w *writeTx) error {
		q := b.queues[p.Queue]
		if q == nil {
			return nil // gone with a failed commit's EnsureQueues
		}
		for i, c := range p.Changes {
			seq, m, err := held(q, c.ReceiptHandle)
			if err == nil && m.visibleAt <= w.now {
				err = fmt.Errorf("%w: lease expired", queue.ErrReceiptInvalid)
			}
			results[i] = err
			if err != nil {
				continue
			}
			m.visibleAt = w.now + int64(c.Timeout)
			if _, err := w.update(q, seq, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("change visibility %s: %w", p.Queue, err)
	}
	return results, nil
}

// Stats reads the counts the index keeps; it touches no disk.
func (b *Backend) Stats(_ context.Context, p *queue.StatsParams) ([]queue.Stats, error) {
	if err := b.usable(); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	now := b.opts.Clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]queue.Stats, len(p.Queues))
	for i, name := range p.Queues {
		q := b.queues[name]
		if q == nil {
			return nil, fmt.Errorf("stats %s: %w", name, queue.ErrQueueNotFound)
		}
		out[i] = q.stats(now)
	}
	return out, nil
}

// Sweep deletes every message older than its queue's retention, counted
// from its first send, and every expired idempotency key, in operations
// of at most a few thousand each, and returns how many messages it
// deleted. It runs every Options.SweepInterval.
func (b *Backend) Sweep(ctx context.Context) (int, error) {
	total := 0
	for {
		perQueue := map[string]int{}
		n, keys := 0, 0
		err := b.do(ctx, 0, func(w *writeTx) error {
			clear(perQueue)
			n = 0
			var err error
			b.keysMu.Lock()
			keys, err = w.sweepKeys(b.keys, sweepChunk)
			b.keysMu.Unlock()
			if err != nil {
				return err
			}
			for name, q := range b.queues {
				cutoff := w.now - int64(q.spec.Retention)
				for n < sweepChunk {
					e, ok := q.oldest()
					if !ok || e.at > cutoff {
						break
					}
					if err := w.remove(q, e.seq); err != nil {
						return err
					}
					perQueue[name]++
					n++
				}
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		total += n
		for name, c := range perQueue {
			b.opts.Logger.InfoContext(ctx, "retention sweep deleted expired messages",
				slog.String("queue", name), slog.Int("num_messages_deleted", c))
		}
		if n < sweepChunk && keys < sweepChunk {
			return total, nil
		}
	}
}
