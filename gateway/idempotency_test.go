package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

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
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.EnsureQueues(ctx, []queue.QueueSpec{{Name: "q"}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	first := newIdempotency(time.Minute, b)
	e, id, err := first.begin(ctx, "acme", "order-1", 1, now)
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
		_, id, _ := first.begin(ctx, "acme", "order-1", 5, now)
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
		e, id, err := restarted.begin(ctx, tt.tenant, tt.key, 2, now)
		if err != nil || id != tt.wantID || (e == nil) != (tt.wantID != "") {
			t.Errorf("%s/%s after a restart: entry %v, id %q, %v; want id %q", tt.tenant, tt.key, e, id, err, tt.wantID)
		}
	}
	if _, id, _ := restarted.begin(ctx, "acme", "order-1", 3, now.Add(30*time.Second)); id != "job-1" {
		t.Errorf("second retry: %q, want job-1", id)
	}
	if n := len(restarted.m); n != 2 {
		t.Errorf("%d entries in memory, want the 2 unsettled claims (acme/order-2, beta/order-1)", n)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, err = newIdempotency(time.Minute, b).begin(ctx, "acme", "order-1", 4, now)
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
