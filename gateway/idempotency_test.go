package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
)

// TestIdempotencyStoredWithTheJob runs the key memory over a real
// embedded backend: a key stored with its job is found by a fresh memory
// (a restarted gateway), other tenants' keys are not, a concurrent submit
// of a key waits for the first, only unsettled claims stay in memory, and
// a backend that cannot answer fails the claim as UNAVAILABLE.
func TestIdempotencyStoredWithTheJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openKeyStore(t)
	now := time.Now()
	first := newIdempotency(time.Minute, b)
	e, id, err := first.begin(ctx, "acme", "order-1", now)
	if err != nil || e == nil || id != "" {
		t.Fatalf("first claim: %v %q %v", e, id, err)
	}
	res, err := b.Send(ctx, &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0", Body: []byte("job"), Key: first.stored(e, "job-1", now)}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("send: %v %v", err, res)
	}
	// A concurrent submit of the key waits for the first and then gets its
	// id from the store.
	waiter := make(chan string)
	go func() {
		_, id, _ := first.begin(ctx, "acme", "order-1", now)
		waiter <- id
	}()
	first.finish(e, "job-1", now)
	if id := <-waiter; id != "job-1" {
		t.Errorf("concurrent submit of the key: %q, want job-1", id)
	}
	// The store holds the key: nothing stays in memory once claims settle.
	if n := len(first.m); n != 0 {
		t.Errorf("%d entries in memory after every claim settled, want 0", n)
	}

	restarted := newIdempotency(time.Minute, b)
	tests := []struct {
		tenant, key string
		wantID      string
	}{
		{"acme", "order-1", "job-1"},
		{"acme", "order-2", ""},
		{"beta", "order-1", ""}, // keys are per tenant
	}
	for _, tt := range tests {
		e, id, err := restarted.begin(ctx, tt.tenant, tt.key, now)
		if err != nil || id != tt.wantID || (e == nil) != (tt.wantID != "") {
			t.Errorf("%s/%s after a restart: entry %v, id %q, %v; want id %q", tt.tenant, tt.key, e, id, err, tt.wantID)
		}
	}
	if _, id, _ := restarted.begin(ctx, "acme", "order-1", now.Add(30*time.Second)); id != "job-1" {
		t.Errorf("second retry: %q, want job-1", id)
	}
	if n := len(restarted.m); n != 2 {
		t.Errorf("%d entries in memory, want the 2 unsettled claims (acme/order-2, beta/order-1)", n)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, err = newIdempotency(time.Minute, b).begin(ctx, "acme", "order-1", now)
	if !errors.Is(err, queue.ErrClosed) || beginError(err).Code() != codes.Unavailable {
		t.Fatalf("lookup on a closed backend: %v (%v), want ErrClosed as UNAVAILABLE", err, beginError(err).Code())
	}
}

func TestBeginErrorOfAnEndedCall(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		give error
		want codes.Code
	}{
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{queue.ErrUnavailable, codes.Unavailable},
	} {
		if got := beginError(tt.give).Code(); got != tt.want {
			t.Errorf("%v: %v, want %v", tt.give, got, tt.want)
		}
	}
}

// pairedLookups is a key store whose first two lookups wait (up to a
// limit) for each other: with keys claimed in request order, two calls
// carrying keys [k1, k2] and [k2, k1] each held their first key there and
// then waited for the other's, for as long as the calls lasted.
type pairedLookups struct {
	queue.Backend
	store queue.KeyStore
	mu    sync.Mutex
	n     int
	both  chan struct{}
}

func (p *pairedLookups) LookupKey(ctx context.Context, params *queue.LookupKeyParams) (*queue.StoredKey, error) {
	p.mu.Lock()
	p.n++
	n := p.n
	if n == 2 {
		close(p.both)
	}
	p.mu.Unlock()
	if n <= 2 {
		select {
		case <-p.both:
		case <-time.After(300 * time.Millisecond):
		}
	}
	return p.store.LookupKey(ctx, params)
}

// TestBatchesSharingKeysInOppositeOrder: two SubmitBatch calls with the
// same two keys in opposite order are both answered, each key names one
// job in both answers, and the keys are free for a later Submit.
func TestBatchesSharingKeysInOppositeOrder(t *testing.T) {
	t.Parallel()
	tb := setupWrapped(t, Config{}, func(b queue.Backend) queue.Backend {
		return &pairedLookups{Backend: b, store: b.(queue.KeyStore), both: make(chan struct{})}
	})
	ctx, cancel := context.WithTimeout(key(t.Context(), "acme-key-1"), 5*time.Second)
	defer cancel()
	job := func(k string) *ingestv1.SubmitRequest {
		return &ingestv1.SubmitRequest{Payload: []byte(k), IdempotencyKey: k}
	}
	orders := [][]string{{"k1", "k2"}, {"k2", "k1"}}
	ids := make([]map[string]string, len(orders))
	var wg sync.WaitGroup
	for i, keys := range orders {
		wg.Go(func() {
			resp, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{job(keys[0]), job(keys[1])}})
			if err != nil {
				t.Errorf("call with keys %v: %v", keys, err)
				return
			}
			ids[i] = map[string]string{}
			for j, r := range resp.GetResults() {
				if r.GetError() != nil {
					t.Errorf("call with keys %v, job %d: %v", keys, j, r.GetError())
				}
				ids[i][keys[j]] = r.GetJobId()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, k := range []string{"k1", "k2"} {
		if ids[0][k] == "" || ids[0][k] != ids[1][k] {
			t.Errorf("key %s named jobs %q and %q, want one job", k, ids[0][k], ids[1][k])
		}
	}
	resp, err := tb.client.Submit(ctx, job("k1"))
	if err != nil || !resp.GetDuplicate() || resp.GetJobId() != ids[0]["k1"] {
		t.Errorf("later Submit of k1: %v, %v; want a duplicate of %s", resp, err, ids[0]["k1"])
	}
}

// onlyKeyStore hides every method of a key store but LookupKey, so the
// gateway looks keys up one by one.
type onlyKeyStore struct{ queue.KeyStore }

// TestClaimLooksUpEveryNewKey: a call's claims are looked up in the
// store, in one call (queue.MultiKeyStore) or key by key: a key stored
// with a job answers its id and is released, the others stay claimed
// under their stored (tenant-scoped) key, and a store that cannot answer
// fails and releases every claim.
func TestClaimLooksUpEveryNewKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openKeyStore(t)
	now := time.Now()
	res, err := b.Send(ctx, &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{
		{ID: "0", Body: []byte("job"), Key: &queue.StoredKey{Key: "acme\x00k1", Value: "job-1", Expires: now.Add(time.Hour)}},
	}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("send: %v %v", err, res)
	}
	stores := []struct {
		name  string
		store queue.KeyStore
	}{
		{"one call", b},
		{"key by key", onlyKeyStore{b}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			s := &idempotency{window: time.Minute, store: st.store, m: map[idemKey]*idemEntry{}}
			claims := []keyClaim{{key: "k0"}, {key: "k1"}, {key: "k2"}}
			done := s.claim(ctx, "acme", claims, now)
			for i, want := range []struct{ firstID, stored string }{{"", "acme\x00k0"}, {"job-1", ""}, {"", "acme\x00k2"}} {
				c := claims[i]
				switch {
				case c.err != nil || c.firstID != want.firstID:
					t.Errorf("claim of %s: first id %q, %v; want %q", c.key, c.firstID, c.err, want.firstID)
				case want.stored == "" && c.entry != nil:
					t.Errorf("claim of %s: still held, want it released", c.key)
				case want.stored != "" && (c.entry == nil || c.entry.stored != want.stored):
					t.Errorf("claim of %s: entry %+v, want one stored as %q", c.key, c.entry, want.stored)
				}
			}
			s.mu.Lock()
			for i := range claims {
				if e := claims[i].entry; e != nil {
					s.settle(e, "", now)
				}
			}
			s.mu.Unlock()
			close(done)
		})
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, st := range stores {
		t.Run(st.name+", closed", func(t *testing.T) {
			s := &idempotency{window: time.Minute, store: st.store, m: map[idemKey]*idemEntry{}}
			claims := []keyClaim{{key: "k0"}, {key: "k1"}}
			close(s.claim(ctx, "acme", claims, now))
			for _, c := range claims {
				if !errors.Is(c.err, queue.ErrClosed) || c.entry != nil {
					t.Errorf("claim of %s on a closed store: %+v, want ErrClosed and no entry", c.key, c)
				}
			}
			if len(s.m) != 0 {
				t.Errorf("%d claims held, want none", len(s.m))
			}
		})
	}
}

// openKeyStore opens an embedded store with one queue, "q", closed when
// the test ends (a test may close it before).
func openKeyStore(t *testing.T) *embeddedqueue.Backend {
	t.Helper()
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if err := b.EnsureQueues(t.Context(), []queue.QueueSpec{{Name: "q"}}); err != nil {
		t.Fatal(err)
	}
	return b
}
