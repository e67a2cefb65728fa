package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/queue"
)

// idempotency remembers, per tenant and key, the job id of the first
// accepted submit for a window. Concurrent submits with one key are
// serialised: the second waits for the first and then answers its id, or,
// if the first failed, goes ahead itself.
//
// On a backend that is a queue.KeyStore (the embedded one) the key is
// stored in the commit that stores the job (see stored), and a key this
// process holds no claim on is looked up there, so a retry after a crash
// or restart of the gateway gets the first job's id. The store is then the
// memory: an entry here lives only while its submit is under way (so that
// concurrent submits of one key wait for the first), and the map stays as
// small as the submits in flight, however many keys the window holds.
// Otherwise (SQS) the
// memory is per gateway process: a retry that reaches another gateway or
// arrives after a restart is enqueued again, which is why workers must
// also be idempotent on job id (at-least-once delivery).
type idempotency struct {
	window time.Duration
	store  queue.KeyStore // nil: memory only
	mu     sync.Mutex
	m      map[idemKey]*idemEntry
}

type idemKey struct{ tenant, key string }

type idemEntry struct {
	key     idemKey
	stored  string        // storeKey(key), when the backend stores keys
	done    chan struct{} // closed when the first submit finished
	jobID   string        // set before done is closed, if it succeeded
	expires time.Time
}

// newIdempotency remembers keys for window, and stores them with the jobs
// if backend is a queue.KeyStore.
func newIdempotency(window time.Duration, backend queue.Backend) *idempotency {
	store, _ := backend.(queue.KeyStore)
	return &idempotency{window: window, store: store, m: map[idemKey]*idemEntry{}}
}

// begin claims key. It returns (nil, id) when an earlier job holds the
// key, and (entry, "") when the caller is now first and must call finish.
// A claim under way elsewhere is waited for: callers that claim several
// keys claim them in sorted order (batch.claimKeys).
func (s *idempotency) begin(ctx context.Context, tenant, key string, now time.Time) (*idemEntry, string, error) {
	k := idemKey{tenant, key}
	for {
		s.mu.Lock()
		e := s.m[k]
		switch {
		case e == nil || (isClosed(e.done) && (e.jobID == "" || now.After(e.expires))):
			e = &idemEntry{key: k, done: make(chan struct{})}
			s.m[k] = e
			s.mu.Unlock()
			return s.lookup(ctx, e, now)
		case isClosed(e.done):
			s.mu.Unlock()
			return nil, e.jobID, nil
		}
		s.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
}

// lookup asks the backend about a key this process does not hold, for
// the new entry e that the caller has claimed.
func (s *idempotency) lookup(ctx context.Context, e *idemEntry, now time.Time) (*idemEntry, string, error) {
	if s.store == nil {
		return e, "", nil
	}
	e.stored = storeKey(e.key)
	stored, err := s.store.LookupKey(ctx, &queue.LookupKeyParams{Key: e.stored})
	switch {
	case err != nil:
		s.finish(e, "", now)
		return nil, "", err
	case stored == nil:
		return e, "", nil
	}
	s.finish(e, stored.Value, now)
	return nil, stored.Value, nil
}

// storeKey scopes a key by tenant for the backend; tenant ids have no NUL.
func storeKey(k idemKey) string { return k.tenant + "\x00" + k.key }

// stored is the key to store with the job that claimed e as jobID, or nil
// when there is no claim or the backend does not store keys.
func (s *idempotency) stored(e *idemEntry, jobID string, now time.Time) *queue.StoredKey {
	if e == nil || s.store == nil {
		return nil
	}
	return &queue.StoredKey{Key: e.stored, Value: jobID, Expires: now.Add(s.window)}
}

// beginError is the status of a submit whose key could not be claimed:
// its call ended, or the backend could not look the key up.
func beginError(err error) *status.Status {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err)
	}
	return unavailable(err)
}

// finish records the outcome of the submit that claimed e; an empty jobID
// means it failed and frees the key. With a key store, which now holds
// the key if the submit succeeded, the entry is dropped: submits waiting
// on it claim the key anew and find it there.
func (s *idempotency) finish(e *idemEntry, jobID string, now time.Time) {
	s.mu.Lock()
	e.jobID = jobID
	e.expires = now.Add(s.window)
	if s.store != nil && s.m[e.key] == e {
		delete(s.m, e.key)
	}
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
