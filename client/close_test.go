package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// TestClientClosed: every call after Close, or cut short by it, fails
// with ErrClientClosed, NewProducer included, and a second Close returns
// nil. They failed with CANCELED "the client connection is closing", the
// code of a cancelled context, NewProducer succeeded and its futures
// failed later, and a second Close returned an error (found by a tester).
func TestClientClosed(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	s := &scripted{submit: func(ctx context.Context, n int, _ *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}}
	serveScripted(t, s)
	t.Cleanup(func() { close(release) })
	c := dial(t, s.addr, client.Config{})
	ctx := t.Context()

	inFlight := make(chan error, 1)
	go func() {
		_, err := c.Submit(ctx, client.Job{Payload: []byte("x")})
		inFlight <- err
	}()
	<-entered
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}

	_, submitErr := c.Submit(ctx, client.Job{Payload: []byte("x")})
	_, batchErr := c.SubmitBatch(ctx, []client.Job{{Payload: []byte("x")}})
	_, producerErr := c.NewProducer(client.ProducerConfig{})
	for _, tc := range []struct {
		call string
		err  error
	}{
		{"Submit under way", <-inFlight},
		{"Submit", submitErr},
		{"SubmitBatch", batchErr},
		{"NewProducer", producerErr},
	} {
		if !errors.Is(tc.err, client.ErrClientClosed) || errors.Is(tc.err, context.Canceled) {
			t.Errorf("%s after Close: %v; want ErrClientClosed, not context.Canceled", tc.call, tc.err)
		}
	}
}
