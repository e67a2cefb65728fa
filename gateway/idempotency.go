package gateway

import (
	"context"
	"sync"
	"time"
)

// idempotency remembers, per tenant and key, the job id of the first
// accepted submit for a window. Concurrent submits with one key are
// serialised: the second waits for the first and then answers its id, or,
// if the first failed, goes ahead itself.
//
// The memory is per gateway process: a retry that reaches another gateway
// or arrives after a restart is enqueued again, which is why workers must
// also be idempotent on job id (at-least-once delivery).
type idempotency struct {
	window time.Duration
	mu     sync.Mutex
	m      map[idemKey]*idemEntry
}

type idemKey struct{ tenant, key string }

type idemEntry struct {
	done    chan struct{} // closed when the first submit finished
	jobID   string        // set before done is closed, if it succeeded
	expires time.Time
	owner   any // the batch that created the entry, to spot repeats inside one batch
}

func newIdempotency(window time.Duration) *idempotency {
	return &idempotency{window: window, m: map[idemKey]*idemEntry{}}
}

// begin claims key for owner. It returns (nil, id) when an earlier job
// holds the key, (entry, "") when the caller is now first and must call
// finish, and (other, "") with other.owner == owner when the key is
// already claimed by the same batch.
func (s *idempotency) begin(ctx context.Context, tenant, key string, owner any, now time.Time) (*idemEntry, string, error) {
	k := idemKey{tenant, key}
	for {
		s.mu.Lock()
		e := s.m[k]
		switch {
		case e == nil || (isClosed(e.done) && (e.jobID == "" || now.After(e.expires))):
			e = &idemEntry{done: make(chan struct{}), owner: owner}
			s.m[k] = e
			s.mu.Unlock()
			return e, "", nil
		case isClosed(e.done):
			s.mu.Unlock()
			return nil, e.jobID, nil
		case e.owner == owner:
			s.mu.Unlock()
			return e, "", nil
		}
		s.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
}

// finish records the outcome of the submit that claimed e; an empty jobID
// means it failed and frees the key.
func (s *idempotency) finish(e *idemEntry, jobID string, now time.Time) {
	s.mu.Lock()
	e.jobID = jobID
	e.expires = now.Add(s.window)
	s.mu.Unlock()
	close(e.done)
}

// sweep forgets expired keys.
func (s *idempotency) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.m {
		if isClosed(e.done) && (e.jobID == "" || now.After(e.expires)) {
			delete(s.m, k)
		}
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
