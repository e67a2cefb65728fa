package gateway

import (
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestNewJobIDs: the ids of a call, and of calls one after another, are
// ULIDs of the current time, each greater than the one before; calls at
// once never share one.
func TestNewJobIDs(t *testing.T) {
	t.Parallel()
	before := time.Now().Add(-time.Millisecond)
	var last ulid.ULID
	for _, n := range []int{1, 100, 3, 1000} {
		ids := newJobIDs(n)
		if len(ids) != n*ulid.EncodedSize {
			t.Fatalf("newJobIDs(%d) is %d bytes", n, len(ids))
		}
		for i := range n {
			id, err := ulid.ParseStrict(ids[i*ulid.EncodedSize : (i+1)*ulid.EncodedSize])
			if err != nil {
				t.Fatal(err)
			}
			if id.Compare(last) <= 0 {
				t.Fatalf("id %s after %s", id, last)
			}
			if at := ulid.Time(id.Time()); at.Before(before) || at.After(time.Now().Add(time.Millisecond)) {
				t.Fatalf("id %s of %s, made after %s", id, at, before)
			}
			last = id
		}
	}

	const callers, calls, n = 8, 50, 20
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range calls {
				ids := newJobIDs(n)
				mu.Lock()
				for i := range n {
					id := ids[i*ulid.EncodedSize : (i+1)*ulid.EncodedSize]
					if seen[id] {
						t.Errorf("id %s made twice", id)
					}
					seen[id] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
