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

// Idempotency keys (queue.KeyStore). A send entry's key is stored in the
// transaction that stores its message, so both survive a crash or
// neither does. The records are ordered by expiry, so a commit appends
// its keys at the tail of one bucket instead of writing a page of a
// randomly keyed tree for each (keys are random: one 4 KiB page per
// keyed job made commits of keyed sends several times slower):
//
//	keys-expiry  expires (8, unix ns) ‖ key → keyValueMark ‖ value
//
// LookupKey reads an in-memory index of the unexpired keys (Backend.keys),
// built at Open from those records and kept in step by every send and
// sweep. Builds before the index stored the value in a second bucket,
// keys (key → expires ‖ value), with an empty value here; such records
// are still read and swept, never written.
var (
	keysBucket      = []byte("keys")
	keyExpiryBucket = []byte("keys-expiry")
)

// keyValueMark starts the value of a keys-expiry record that holds it.
const keyValueMark = 'v'

var _ queue.KeyStore = (*Backend)(nil)

// keyRecord is a stored key in the index.
type keyRecord struct {
	expires int64 // unix ns
	value   string
}

// putKey stores k and indexes it; the writer holds b.mu. An earlier
// (expired) record of the same key stays until the sweep.
func (w *writeTx) putKey(keys map[string]keyRecord, k *queue.StoredKey) error {
	var xb *bolt.Bucket
	if w.tx != nil { // else checkpointing: the change goes to the log alone
		if xb = w.tx.Bucket(keyExpiryBucket); xb == nil {
			return errors.New("key bucket missing")
		}
	}
	exp := k.Expires.UnixNano()
	v := append(append(make([]byte, 0, 1+len(k.Value)), keyValueMark), k.Value...)
	if err := w.put(xb, keyExpiryBucket, expiryKey(binary.BigEndian.AppendUint64(nil, uint64(exp)), []byte(k.Key)), v); err != nil {
		return err
	}
	keys[k.Key] = keyRecord{expires: exp, value: k.Value}
	return nil
}

func expiryKey(exp, key []byte) []byte {
	return append(append(make([]byte, 0, len(exp)+len(key)), exp...), key...)
}

// loadKeys reads the keys unexpired at now from tx.
func loadKeys(tx *bolt.Tx, now int64) (map[string]keyRecord, error) {
	kb, xb := tx.Bucket(keysBucket), tx.Bucket(keyExpiryBucket)
	if kb == nil || xb == nil {
		return nil, errors.New("key buckets missing")
	}
	keys := map[string]keyRecord{}
	c := xb.Cursor()
	for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, uint64(now+1))); k != nil; k, v = c.Next() {
		if len(k) < 8 {
			return nil, fmt.Errorf("bad key expiry record %x", k)
		}
		switch {
		case len(v) > 0 && v[0] == keyValueMark:
			v = v[1:]
		case len(v) == 0: // an older build's: the value is in keys
			old := kb.Get(k[8:])
			if len(old) < 8 || !bytes.Equal(old[:8], k[:8]) {
				continue
			}
			v = old[8:]
		default:
			return nil, fmt.Errorf("bad key record %x", k)
		}
		// Ordered by expiry: a later record of a key replaces an earlier.
		keys[string(k[8:])] = keyRecord{expires: int64(binary.BigEndian.Uint64(k)), value: string(v)}
	}
	return keys, nil
}

// sweepKeys deletes up to limit keys that expired by w.now, from the
// store and from keys, and returns how many it deleted; the writer holds
// b.mu.
func (w *writeTx) sweepKeys(keys map[string]keyRecord, limit int) (int, error) {
	kb, xb := w.tx.Bucket(keysBucket), w.tx.Bucket(keyExpiryBucket)
	if kb == nil || xb == nil {
		return 0, errors.New("key buckets missing")
	}
	var expired [][]byte
	c := xb.Cursor()
	for k, _ := c.First(); k != nil && len(expired) < limit; k, _ = c.Next() {
		if len(k) < 8 || int64(binary.BigEndian.Uint64(k)) > w.now {
			break
		}
		expired = append(expired, bytes.Clone(k))
	}
	for _, xk := range expired {
		if err := w.del(xb, keyExpiryBucket, xk); err != nil {
			return 0, err
		}
		exp, key := int64(binary.BigEndian.Uint64(xk)), xk[8:]
		// The key may have been stored again since, with a later expiry.
		if r, ok := keys[string(key)]; ok && r.expires == exp {
			delete(keys, string(key))
		}
		if v := kb.Get(key); len(v) >= 8 && bytes.Equal(v[:8], xk[:8]) {
			if err := w.del(kb, keysBucket, key); err != nil {
				return 0, err
			}
		}
	}
	return len(expired), nil
}

// LookupKey returns the unexpired key stored by a send that was answered,
// or nil. It reads the in-memory index, which in interval mode holds the
// sends answered since the last commit too.
func (b *Backend) LookupKey(ctx context.Context, p *queue.LookupKeyParams) (*queue.StoredKey, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("lookup key: %w", queue.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lookup key: %w", err)
	}
	now := b.opts.Clock().UnixNano()
	b.mu.Lock()
	r, ok := b.keys[p.Key]
	b.mu.Unlock()
	if !ok || r.expires <= now {
		return nil, nil
	}
	return &queue.StoredKey{Key: p.Key, Value: r.value, Expires: time.Unix(0, r.expires)}, nil
}
