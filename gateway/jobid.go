package gateway

import (
	crand "crypto/rand"
	"encoding/binary"
	"math/rand"
	"strings"
	"sync"

	"github.com/oklog/ulid/v2"
)

// jobIDSource makes job ids: ULIDs, monotonic within a millisecond in
// this process, as ulid.Make makes them (the same kind of entropy: a
// math/rand source behind ulid.Monotonic), but seeded from crypto/rand
// and locked once per call rather than once per id. ulid.Make took its
// lock, read the clock and made an allocation for every job of a
// SubmitBatch.
var jobIDSource = struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
}{entropy: ulid.Monotonic(rand.New(rand.NewSource(randomSeed())), 0)} //nolint:gosec // ids need uniqueness, not secrecy, as ulid.Make's

func randomSeed() int64 {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand aborts instead)
	return int64(binary.LittleEndian.Uint64(b[:]))
}

// newJobIDs returns n new job ids, each ulid.EncodedSize long, one after
// another in one string: made under one lock and one clock reading, in
// one allocation for their text.
func newJobIDs(n int) string {
	var id ulid.ULID
	ms := ulid.Now()
	if err := id.SetTime(ms); err != nil {
		panic(err) // past the year 10889, as ulid.Make
	}
	var text strings.Builder
	text.Grow(n * ulid.EncodedSize)
	var buf [ulid.EncodedSize]byte
	jobIDSource.Lock()
	defer jobIDSource.Unlock()
	for range n {
		if err := jobIDSource.entropy.MonotonicRead(ms, id[6:]); err != nil {
			panic(err) // the entropy overflowed within a millisecond (some 2^48 ids): ulid.Make panics too
		}
		_ = id.MarshalTextTo(buf[:]) // buf is the right size
		text.Write(buf[:])
	}
	return text.String()
}
