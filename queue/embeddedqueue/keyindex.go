package embeddedqueue

import (
	"crypto/sha256"

	"github.com/oklog/ulid/v2"
)

// keyIndex is the in-memory index of the unexpired idempotency keys, which
// LookupKey reads. A window of keys can be millions of entries (every job
// a client sends carries one), so an entry is small and holds no pointer
// for the garbage collector to scan: the key is kept as a 128-bit digest
// (SHA-256, truncated) and a value that is a job id (a ULID, as the
// gateway stores) as its 16 bytes: 40 bytes per entry, 67–101 per key
// with the map's spare room (BenchmarkKeyIndexMemory; it depends on where
// the map is between doublings), where a map of strings took 99–132 and
// was scanned at every collection. Values that are not ULIDs are kept as
// strings beside.
//
// Two distinct keys share a digest with a chance of about n²/2¹²⁹ among n
// keys: 10⁻²¹ for a billion.
type keyIndex struct {
	m     map[keyDigest]keyEntry
	other map[keyDigest]string // values that are not ULIDs in canonical form
	peak  int                  // the most keys held since the index last shrank
}

type keyDigest [16]byte

type keyEntry struct {
	expires int64     // unix ns
	id      ulid.ULID // zero: the value is in keyIndex.other
}

func newKeyIndex() *keyIndex {
	return &keyIndex{m: map[keyDigest]keyEntry{}, other: map[keyDigest]string{}}
}

func digestOf(key string) keyDigest {
	sum := sha256.Sum256([]byte(key))
	return keyDigest(sum[:16])
}

// indexedKey is a key's entry in the index, made before the writer
// stores it: a send hashes and parses its keys on its caller's goroutine,
// not on the writer.
type indexedKey struct {
	d     keyDigest
	e     keyEntry
	value string // when e.id is zero: a value that is not a ULID
}

func newIndexedKey(key, value string, expires int64) indexedKey {
	k := indexedKey{d: digestOf(key), e: keyEntry{expires: expires}}
	if id, err := ulid.ParseStrict(value); err == nil && id != (ulid.ULID{}) && canonical(id, value) {
		k.e.id = id
	} else {
		k.value = value
	}
	return k
}

// put records key's value and expiry, replacing what was recorded unless
// that expires later.
func (x *keyIndex) put(key, value string, expires int64) {
	x.putIndexed(newIndexedKey(key, value, expires))
}

// putIndexed is put for a key made ready by newIndexedKey.
func (x *keyIndex) putIndexed(k indexedKey) {
	if old, ok := x.m[k.d]; ok && old.expires > k.e.expires {
		return // the later expiry wins, as when Open reads the records in expiry order
	}
	if k.e.id != (ulid.ULID{}) {
		delete(x.other, k.d)
	} else {
		x.other[k.d] = k.value
	}
	x.m[k.d] = k.e
	x.peak = max(x.peak, len(x.m))
}

// canonical reports whether value is id's own spelling (ParseStrict also
// takes lower case), without building a string.
func canonical(id ulid.ULID, value string) bool {
	var text [ulid.EncodedSize]byte
	return id.MarshalTextTo(text[:]) == nil && string(text[:]) == value
}

// get returns key's value and expiry, if recorded.
func (x *keyIndex) get(key string) (value string, expires int64, ok bool) {
	return x.getDigest(digestOf(key))
}

// getDigest is get for the key whose digest is d.
func (x *keyIndex) getDigest(d keyDigest) (value string, expires int64, ok bool) {
	e, ok := x.m[d]
	switch {
	case !ok:
		return "", 0, false
	case e.id == ulid.ULID{}:
		return x.other[d], e.expires, true
	}
	return e.id.String(), e.expires, true
}

// forget drops key if it is recorded with this expiry: a key stored again
// since, with a later one, stays.
func (x *keyIndex) forget(key string, expires int64) {
	d := digestOf(key)
	if e, ok := x.m[d]; ok && e.expires == expires {
		delete(x.m, d)
		delete(x.other, d)
	}
	if x.peak > shrinkMin && len(x.m) < x.peak/4 {
		x.shrink()
	}
}

// shrink moves the index into maps sized for the keys it holds, once
// they are under a quarter of the most it held since it last shrank: Go
// maps never give back their buckets, so the keys of a burst, once
// swept, kept their memory until a restart (as memQueue.shrink).
func (x *keyIndex) shrink() {
	m := make(map[keyDigest]keyEntry, len(x.m))
	for d, e := range x.m {
		m[d] = e
	}
	other := make(map[keyDigest]string, len(x.other))
	for d, v := range x.other {
		other[d] = v
	}
	x.m, x.other, x.peak = m, other, len(m)
}

func (x *keyIndex) len() int { return len(x.m) }
