package client_test

import (
	"bytes"
	"testing"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/gateway"
)

// TestBatchBytesCappedAtTheGatewayLimit: a MaxBatchBytes above what the
// gateway takes in one SubmitBatch (16 MiB) is capped, as MaxBatchJobs
// is at 500. It was used as given, so calls went out that the gateway
// refused as a whole (INVALID_ARGUMENT on "jobs", or the transport's
// RESOURCE_EXHAUSTED) and every job of them failed, in SubmitBatch and in
// a Producer alike.
func TestBatchBytesCappedAtTheGatewayLimit(t *testing.T) {
	t.Parallel()
	if client.MaxBatchBytes != gateway.MaxBatchBytes {
		t.Fatalf("client.MaxBatchBytes %d, gateway.MaxBatchBytes %d", client.MaxBatchBytes, gateway.MaxBatchBytes)
	}
	// 120 jobs of 150 KiB: about 18 MiB in all.
	jobs := make([]client.Job, 120)
	for i := range jobs {
		jobs[i] = client.Job{Payload: bytes.Repeat([]byte{byte(i)}, 150<<10)}
	}
	c := newClient(t, gatewayAddr(t), "open-key", client.Config{MaxBatchBytes: 64 << 20})
	t.Run("SubmitBatch", func(t *testing.T) {
		results, err := c.SubmitBatch(t.Context(), jobs)
		if err != nil {
			t.Fatalf("SubmitBatch: %v", err)
		}
		for i, r := range results {
			if r.JobID == "" {
				t.Fatalf("job %d: %+v", i, r)
			}
		}
	})
	t.Run("Producer", func(t *testing.T) {
		p := newProducer(t, c, client.ProducerConfig{MaxBatchBytes: 64 << 20})
		// Every job goes in the call after the first, which a lone job
		// starts: the rest gather behind it.
		var futs []*client.Future
		for _, j := range jobs {
			f, err := p.Send(t.Context(), j)
			if err != nil {
				t.Fatal(err)
			}
			futs = append(futs, f)
		}
		if err := p.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		for i, f := range futs {
			if res, err := f.Wait(t.Context()); err != nil {
				t.Fatalf("job %d: %+v, %v", i, res, err)
			}
		}
	})
}
