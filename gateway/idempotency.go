package gateway

import (
	"context"
	"errors"
	"strings"
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
	key    idemKey
	stored string // key as the backend stores it (storeKeys), when it stores keys
	// done is closed when the call that claimed the entry ended: one
	// channel for all the entries of a call (claim), which are settled
	// together.
	done    chan struct{}
	jobID   string // set before done is closed, if it succeeded
	expires time.Time
}

// newIdempotency remembers keys for window, and stores them with the jobs
// if backend is a queue.KeyStore.
func newIdempotency(window time.Duration, backend queue.Backend) *idempotency {
	store, _ := backend.(queue.KeyStore)
	return &idempotency{window: window, store: store, m: map[idemKey]*idemEntry{}}
}

// keyClaim is a call's claim on one idempotency key (claim).
type keyClaim struct {
	key     string
	entry   *idemEntry // the call's claim, if it is first
	firstID string     // the job that holds the key, if one does
	err     error      // why the key could not be claimed
	holder  *result    // the job of this call that took the claim
}

// claim claims the keys of claims (distinct, in sorted order) of tenant
// for one call, under one lock where none is held elsewhere, and returns
// the channel the caller closes once it has settled every entry it got
// (settle): the entries of a call share it, and their memory. A claim
// held by another call is waited for, and a call waits only for keys
// greater than every key it holds (they are claimed in sorted order), so
// two calls that share keys never wait for each other. The keys this
// process held no claim on are then looked up in the store, if the
// backend stores keys: a key found there, or that could not be looked up,
// is released at once.
func (s *idempotency) claim(ctx context.Context, tenant string, claims []keyClaim, now time.Time) chan struct{} {
	done := make(chan struct{})
	entries := make([]idemEntry, len(claims))
	s.mu.Lock()
	for i := 0; i < len(claims); {
		c := &claims[i]
		k := idemKey{tenant, c.key}
		e := s.m[k]
		switch {
		case e == nil || (isClosed(e.done) && (e.jobID == "" || now.After(e.expires))):
			e = &entries[i]
			e.key, e.done = k, done
			s.m[k] = e
			c.entry = e
		case isClosed(e.done):
			c.firstID = e.jobID
		default:
			s.mu.Unlock()
			select {
			case <-e.done:
			case <-ctx.Done():
				c.err = ctx.Err()
				i++
			}
			s.mu.Lock()
			continue
		}
		i++
	}
	s.mu.Unlock()
	if s.store != nil {
		s.lookup(ctx, claims, now)
	}
	return done
}

// lookup asks the backend about the keys this process held no claim on,
// the claims' new entries, and releases those it finds or cannot look up.
// A queue.MultiKeyStore is asked about them all in one call.
func (s *idempotency) lookup(ctx context.Context, claims []keyClaim, now time.Time) {
	keys := storeKeys(claims)
	if len(keys) == 0 {
		return
	}
	// found[i] is what the store holds as keys[i]; errs[i], if errs is
	// set, why it could not say, else callErr.
	var found []*queue.StoredKey
	var errs []error
	var callErr error
	if multi, ok := s.store.(queue.MultiKeyStore); ok {
		found, callErr = multi.LookupKeys(ctx, &queue.LookupKeysParams{Keys: keys})
	} else {
		found, errs = make([]*queue.StoredKey, len(keys)), make([]error, len(keys))
		var params queue.LookupKeyParams // one for the call: LookupKey keeps none
		for i, key := range keys {
			params.Key = key
			found[i], errs[i] = s.store.LookupKey(ctx, &params)
		}
	}
	released := false
	i := 0
	for j := range claims {
		c := &claims[j]
		if c.entry == nil {
			continue
		}
		err := callErr
		if errs != nil {
			err = errs[i]
		}
		switch {
		case err != nil:
			c.err = err
			released = true
		case found[i] != nil:
			c.firstID = found[i].Value
			released = true
		}
		i++
	}
	if !released {
		return
	}
	s.mu.Lock()
	for i := range claims {
		c := &claims[i]
		if c.entry != nil && (c.err != nil || c.firstID != "") {
			s.settle(c.entry, c.firstID, now)
			c.entry = nil
		}
	}
	s.mu.Unlock()
}

// begin claims one key, as claim does for a call of one key. It returns
// (nil, id) when an earlier job holds the key, and (entry, "") when the
// caller is now first and must call finish.
func (s *idempotency) begin(ctx context.Context, tenant, key string, now time.Time) (*idemEntry, string, error) {
	c := []keyClaim{{key: key}}
	done := s.claim(ctx, tenant, c, now)
	if c[0].entry == nil {
		close(done)
	}
	return c[0].entry, c[0].firstID, c[0].err
}

// storeKeys sets the stored key of each claim that has a new entry, its
// key scoped by tenant for the backend (tenant NUL key; tenant ids have no
// NUL), and returns them in order. They share one string: a string per
// key was an allocation per keyed job.
func storeKeys(claims []keyClaim) []string {
	n, size := 0, 0
	for i := range claims {
		if e := claims[i].entry; e != nil {
			n++
			size += len(e.key.tenant) + 1 + len(e.key.key)
		}
	}
	if n == 0 {
		return nil
	}
	var all strings.Builder
	all.Grow(size)
	for i := range claims {
		if e := claims[i].entry; e != nil {
			all.WriteString(e.key.tenant)
			all.WriteByte(0)
			all.WriteString(e.key.key)
		}
	}
	text := all.String()
	keys := make([]string, 0, n)
	for i := range claims {
		if e := claims[i].entry; e != nil {
			k := len(e.key.tenant) + 1 + len(e.key.key)
			e.stored, text = text[:k], text[k:]
			keys = append(keys, e.stored)
		}
	}
	return keys
}

// stored is the key to store with the job that claimed e as jobID, or nil
// when there is no claim or the backend does not store keys.
func (s *idempotency) stored(e *idemEntry, jobID string, now time.Time) *queue.StoredKey {
	if e == nil || s.store == nil {
		return nil
	}
	k := s.storedKey(e, jobID, now)
	return &k
}

// storedKey is stored's key, for the caller to place.
func (s *idempotency) storedKey(e *idemEntry, jobID string, now time.Time) queue.StoredKey {
	return queue.StoredKey{Key: e.stored, Value: jobID, Expires: now.Add(s.window)}
}

// beginError is the status of a submit whose key could not be claimed:
// its call ended, or the backend could not look the key up.
func beginError(err error) *status.Status {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err)
	}
	return unavailable(err)
}

// finish settles the entry of a single claim (begin) and closes its
// channel.
func (s *idempotency) finish(e *idemEntry, jobID string, now time.Time) {
	s.mu.Lock()
	s.settle(e, jobID, now)
	s.mu.Unlock()
	close(e.done)
}

// settle records the outcome of the submit that claimed e, before its
// channel is closed; the caller holds s.mu. An empty jobID means it failed
// and frees the key. With a key store, which now holds the key if the
// submit succeeded, the entry is dropped: submits waiting on it claim the
// key anew and find it there.
//
// Kept for the window (no key store), the id is copied: the ids of a
// call share one string (newJobIDs), which one kept id would keep whole.
func (s *idempotency) settle(e *idemEntry, jobID string, now time.Time) {
	e.jobID = jobID
	e.expires = now.Add(s.window)
	switch {
	case s.store == nil:
		e.jobID = strings.Clone(jobID)
	case s.m[e.key] == e:
		delete(s.m, e.key)
	}
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
