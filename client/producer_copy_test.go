package client_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// TestProducerSendKeepsTheJobAsSent: Send returns at once and the job is
// encoded later, when its batch goes out; a caller that reuses its
// payload buffer or attributes map for the next job after Send returned
// must not change the job already sent. The producer kept the caller's
// slice and map, so the job stored was what they held when its call went
// out (and a map changed while a call encoded it crashed the process).
func TestProducerSendKeepsTheJobAsSent(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var got []*ingestv1.SubmitRequest
	s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		if n == 0 {
			close(entered)
			<-release
		}
		mu.Lock()
		got = append(got, req.GetJobs()...)
		mu.Unlock()
		return batchAnswer(req), nil
	}}
	serveScripted(t, s)
	// One call at a time: the second job waits in the producer while the
	// first call is held.
	p := newProducer(t, dial(t, s.addr, client.Config{}), client.ProducerConfig{MaxInFlight: 1})
	ctx := t.Context()
	if _, err := p.Send(ctx, client.Job{Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	<-entered
	buf := []byte("second")
	attrs := map[string]string{"n": "2"}
	f, err := p.Send(ctx, client.Job{Payload: buf, Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "THIRD!")
	attrs["n"] = "3"
	attrs["extra"] = "x"
	close(release)
	if _, err := f.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d jobs reached the gateway, want 2", len(got))
	}
	second := got[1]
	if string(second.GetPayload()) != "second" || len(second.GetAttributes()) != 1 || second.GetAttributes()["n"] != "2" {
		t.Fatalf("second job sent as %q %v, want %q %v", second.GetPayload(), second.GetAttributes(), "second", map[string]string{"n": "2"})
	}
}
