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
// neither does:
//
//	keys         key → expires (8, unix ns) ‖ value
//	keys-expiry  expires (8) ‖ key → empty, so the sweep finds expired keys in order
var (
	keysBucket      = []byte("keys")
	keyExpiryBucket = []byte("keys-expiry")
)

var _ queue.KeyStore = (*Backend)(nil)

// putKey stores k, replacing an earlier (expired) record of the same key.
func (w *writeTx) putKey(k *queue.StoredKey) error {
	kb, xb := w.tx.Bucket(keysBucket), w.tx.Bucket(keyExpiryBucket)
	if kb == nil || xb == nil {
		return errors.New("key buckets missing")
	}
	key := []byte(k.Key)
	if old := kb.Get(key); len(old) >= 8 {
		if err := w.del(xb, keyExpiryBucket, expiryKey(old[:8], key)); err != nil {
			return err
		}
	}
	exp := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(k.Value)), uint64(k.Expires.UnixNano()))
	if err := w.put(kb, keysBucket, key, append(exp, k.Value...)); err != nil {
		return err
	}
	return w.put(xb, keyExpiryBucket, expiryKey(exp[:8], key), []byte{})
}

func expiryKey(exp, key []byte) []byte {
	return append(append(make([]byte, 0, len(exp)+len(key)), exp...), key...)
}

// sweepKeys deletes up to limit keys that expired by w.now and returns
// how many it deleted.
func (w *writeTx) sweepKeys(limit int) (int, error) {
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
		// The key may have been stored again since, with a later expiry.
		if v := kb.Get(xk[8:]); len(v) >= 8 && bytes.Equal(v[:8], xk[:8]) {
			if err := w.del(kb, keysBucket, xk[8:]); err != nil {
				return 0, err
			}
		}
	}
	return len(expired), nil
}

// LookupKey returns the unexpired key stored by a send that was answered,
// or nil. In interval mode it reads the writer's open transaction, which
// holds the sends answered since the last commit.
func (b *Backend) LookupKey(ctx context.Context, p *queue.LookupKeyParams) (*queue.StoredKey, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("lookup key: %w", queue.ErrClosed)
	}
	now := b.opts.Clock().UnixNano()
	var out *queue.StoredKey
	read := func(tx *bolt.Tx) error {
		kb := tx.Bucket(keysBucket)
		if kb == nil {
			return errors.New("key bucket missing")
		}
		v := kb.Get([]byte(p.Key))
		if len(v) < 8 {
			return nil
		}
		exp := int64(binary.BigEndian.Uint64(v))
		if exp > now {
			out = &queue.StoredKey{Key: p.Key, Value: string(v[8:]), Expires: time.Unix(0, exp)}
		}
		return nil
	}
	var err error
	if b.log == nil {
		err = b.db.View(read)
	} else {
		err = b.do(ctx, 0, func(w *writeTx) error { return read(w.tx) })
	}
	if err != nil {
		return nil, fmt.Errorf("lookup key: %w", err)
	}
	return out, nil
}
