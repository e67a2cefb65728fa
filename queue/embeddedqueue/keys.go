package embeddedqueue

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/queue"
)

// Idempotency keys (queue.KeyStore). A send's keys are stored in the
// transaction that stores its messages, so both survive a crash or
// neither does. The records are ordered by expiry, so a commit appends
// its keys at the tail of one bucket instead of writing a page of a
// randomly keyed tree for each (keys are random: one 4 KiB page per
// keyed job made commits of keyed sends several times slower). The keys
// of one send (up to queue.MaxBatch entries), or of the sends of one
// SendMany, that expire together share one record, so a send of keyed
// jobs costs one more write, not one per job:
//
//	keys-expiry  expires (8, unix ns) ‖ message id → keyListMark ‖ (len ‖ key ‖ len ‖ value)…
//
// (the id of the message stored with the first key; records of older
// builds are named by the first key, which nothing reads).
//
// LookupKey reads an in-memory index of the unexpired keys (Backend.keys),
// built at Open from those records and kept in step by every send and
// sweep. Older builds wrote one record per key, keyValueMark ‖ value, and
// before the index the value went to a second bucket, keys (key →
// expires ‖ value), with an empty value here; such records are still read
// and swept, never written.
var (
	keysBucket      = []byte("keys")
	keyExpiryBucket = []byte("keys-expiry")
)

// keyListMark starts the value of a keys-expiry record listing keys and
// their values (uvarint lengths); keyValueMark that of an older build's
// record holding the value of the one key in its name.
const (
	keyListMark  = 'l'
	keyValueMark = 'v'
)

var _ queue.KeyStore = (*Backend)(nil)

// keyRecord is the record of keys that expire together, with their
// index entries: made by prepareSend on the caller's goroutine, so the
// writer neither encodes nor hashes (newKeyRecord).
type keyRecord struct {
	name, value []byte
	keys        []indexedKey
}

// newKeyRecord makes the record of keys, which expire together. It is
// named by the expiry and msgID, the id of the message stored with the
// first key: unique, so no other send's record is replaced (named by the
// first key, two sends whose keys began alike and expired together
// shared one record, and the first one's other keys were gone after a
// restart). Earlier (expired) records of the same keys stay until the
// sweep.
func newKeyRecord(keys []*queue.StoredKey, msgID string) keyRecord {
	exp := keys[0].Expires.UnixNano()
	r := keyRecord{
		name:  append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(msgID)), uint64(exp)), msgID...),
		value: encodeKeyList(keys),
		keys:  make([]indexedKey, len(keys)),
	}
	for i, k := range keys {
		r.keys[i] = newIndexedKey(k.Key, k.Value, exp)
	}
	return r
}

// putKeys stores a record of keys, which its sender indexes once its
// send is answered (publishKeys); the writer holds b.mu.
func (w *writeTx) putKeys(r *keyRecord) error {
	var xb *bolt.Bucket
	if w.tx != nil { // else checkpointing: the change goes to the log alone
		if xb = w.tx.Bucket(keyExpiryBucket); xb == nil {
			return errors.New("key bucket missing")
		}
	}
	return w.put(xb, keyExpiryBucket, r.name, r.value)
}

// publishKeys indexes the keys of records, stored by a send that was
// answered (its record is logged, and synced where its callers wait for
// that): a key is visible to LookupKey only when the send that stored it
// can no longer fail. The send's caller indexes them before it returns,
// so a caller that looks a key up after the send returned finds it. (The
// writer indexed the keys of each group before answering it, at about a
// tenth of its time per keyed job, which every call in the group waited
// for.) Keys expired by now are left out, as a sweep may have deleted
// their record already.
func (b *Backend) publishKeys(records []keyRecord) {
	if len(records) == 0 {
		return
	}
	now := b.opts.Clock().UnixNano()
	b.keysMu.Lock()
	defer b.keysMu.Unlock()
	for i := range records {
		for _, k := range records[i].keys {
			if k.e.expires > now {
				b.keys.putIndexed(k)
			}
		}
	}
}

// encodeKeyList is the value of a record listing keys.
func encodeKeyList(keys []*queue.StoredKey) []byte {
	size := 1
	for _, k := range keys {
		size += 2*binary.MaxVarintLen32 + len(k.Key) + len(k.Value)
	}
	v := append(make([]byte, 0, size), keyListMark)
	for _, k := range keys {
		v = appendVarlen(appendVarlen(v, k.Key), k.Value)
	}
	return v
}

// keyList calls each for every key and value listed in v, the value of
// a keyListMark record, and fails on a malformed list.
func keyList(v []byte, each func(key, value []byte)) error {
	for v = v[1:]; len(v) > 0; {
		var key, value []byte
		var ok bool
		if key, v, ok = cutVarlen(v); !ok {
			return errors.New("bad key list")
		}
		if value, v, ok = cutVarlen(v); !ok {
			return errors.New("bad key list")
		}
		each(key, value)
	}
	return nil
}

func expiryKey(exp, key []byte) []byte {
	return append(append(make([]byte, 0, len(exp)+len(key)), exp...), key...)
}

// loadKeys reads the keys unexpired at now from tx.
func loadKeys(tx *bolt.Tx, now int64) (*keyIndex, error) {
	kb, xb := tx.Bucket(keysBucket), tx.Bucket(keyExpiryBucket)
	if kb == nil || xb == nil {
		return nil, errors.New("key buckets missing")
	}
	keys := newKeyIndex()
	c := xb.Cursor()
	for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(now+1))); k != nil; k, v = c.Next() {
		if len(k) < 8 {
			return nil, fmt.Errorf("bad key expiry record %x", k)
		}
		exp := int64(binary.BigEndian.Uint64(k))
		switch {
		case len(v) > 0 && v[0] == keyListMark:
			// Ordered by expiry: a later record of a key replaces an earlier.
			err := keyList(v, func(key, value []byte) { keys.put(string(key), string(value), exp) })
			if err != nil {
				return nil, fmt.Errorf("key record %x: %w", k, err)
			}
		case len(v) > 0 && v[0] == keyValueMark:
			keys.put(string(k[8:]), string(v[1:]), exp)
		case len(v) == 0: // an older build's: the value is in keys
			old := kb.Get(k[8:])
			if len(old) < 8 || !bytes.Equal(old[:8], k[:8]) {
				continue
			}
			keys.put(string(k[8:]), string(old[8:]), exp)
		default:
			return nil, fmt.Errorf("bad key record %x", k)
		}
	}
	return keys, nil
}

// sweepKeys deletes up to limit key records that expired by w.now, from
// the store and from index, and returns how many it deleted; the writer holds
// b.mu and b.keysMu.
func (w *writeTx) sweepKeys(index *keyIndex, limit int) (int, error) {
	kb, xb := w.tx.Bucket(keysBucket), w.tx.Bucket(keyExpiryBucket)
	if kb == nil || xb == nil {
		return 0, errors.New("key buckets missing")
	}
	type record struct{ name, value []byte }
	var expired []record
	c := xb.Cursor()
	for k, v := c.First(); k != nil && len(expired) < limit; k, v = c.Next() {
		if len(k) < 8 || int64(binary.BigEndian.Uint64(k)) > w.now {
			break
		}
		expired = append(expired, record{bytes.Clone(k), bytes.Clone(v)})
	}
	for _, r := range expired {
		if err := w.del(xb, keyExpiryBucket, r.name); err != nil {
			return 0, err
		}
		exp, key := int64(binary.BigEndian.Uint64(r.name)), r.name[8:]
		if len(r.value) > 0 && r.value[0] == keyListMark {
			if err := keyList(r.value, func(key, _ []byte) { index.forget(string(key), exp) }); err != nil {
				return 0, fmt.Errorf("key record %x: %w", r.name, err)
			}
			continue
		}
		index.forget(string(key), exp)
		if v := kb.Get(key); len(v) >= 8 && bytes.Equal(v[:8], r.name[:8]) {
			if err := w.del(kb, keysBucket, key); err != nil {
				return 0, err
			}
		}
	}
	return len(expired), nil
}

var _ queue.MultiKeyStore = (*Backend)(nil)

// LookupKeys does what LookupKey does for each of p.Keys, under one lock
// of the index, which it reads in one loop: a map of millions of keys,
// where each read is a miss in the processor's caches, and the reads of
// a loop overlap where those of separate calls, each between a lock and
// an unlock, did not (BenchmarkLookupKeys).
func (b *Backend) LookupKeys(ctx context.Context, p *queue.LookupKeysParams) ([]*queue.StoredKey, error) {
	if err := b.usable(); err != nil {
		return nil, fmt.Errorf("lookup keys: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lookup keys: %w", err)
	}
	now := b.opts.Clock().UnixNano()
	digests := make([]keyDigest, len(p.Keys))
	for i, key := range p.Keys {
		digests[i] = digestOf(key)
	}
	type hit struct {
		index   int
		value   string
		expires int64
	}
	var hits []hit
	b.keysMu.Lock() // not b.mu, which the writer holds while it applies a group
	for i, d := range digests {
		if value, expires, ok := b.keys.getDigest(d); ok && expires > now {
			hits = append(hits, hit{i, value, expires})
		}
	}
	b.keysMu.Unlock()
	out := make([]*queue.StoredKey, len(p.Keys))
	stored := make([]queue.StoredKey, len(hits)) // one allocation for the keys found
	for j, h := range hits {
		stored[j] = queue.StoredKey{Key: p.Keys[h.index], Value: h.value, Expires: time.Unix(0, h.expires)}
		out[h.index] = &stored[j]
	}
	return out, nil
}

// LookupKey returns the unexpired key stored by a send that was answered,
// or nil. It reads the in-memory index, which in interval mode holds the
// sends answered since the last commit too.
func (b *Backend) LookupKey(ctx context.Context, p *queue.LookupKeyParams) (*queue.StoredKey, error) {
	if err := b.usable(); err != nil {
		return nil, fmt.Errorf("lookup key: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lookup key: %w", err)
	}
	now := b.opts.Clock().UnixNano()
	d := digestOf(p.Key)
	b.keysMu.Lock() // not b.mu, which the writer holds while it applies a group
	value, expires, ok := b.keys.getDigest(d)
	b.keysMu.Unlock()
	if !ok || expires <= now {
		return nil, nil
	}
	return &queue.StoredKey{Key: p.Key, Value: value, Expires: time.Unix(0, expires)}, nil
}
