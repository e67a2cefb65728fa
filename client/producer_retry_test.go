package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// TestProducerCallRefusalWaitsItsHint: a whole SubmitBatch call refused
// with RESOURCE_EXHAUSTED and a RetryInfo (as a rate-limiting proxy in
// front of the gateway answers) is retried after the hint, also for a job
// that has used up Config.MaxAttempts on earlier rate refusals of its own
// (which do not count against it). The call's wait was taken from the
// jobs' attempt counts alone, so such a job got no wait at all and the
// producer sent the call again at once, as long as the refusals lasted.
func TestProducerCallRefusalWaitsItsHint(t *testing.T) {
	t.Parallel()
	const perJob, callHint = 5, 150 * time.Millisecond
	s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		switch {
		case n < perJob: // the job's own rate refusals: its attempts reach MaxAttempts
			return batchAnswer(req, quotaStatus("rate", time.Millisecond)), nil
		case n < perJob+3: // the whole call refused
			return nil, errRate(callHint)
		}
		return batchAnswer(req), nil
	}}
	serveScripted(t, s)
	p := newProducer(t, dial(t, s.addr, client.Config{MaxAttempts: perJob}), client.ProducerConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	f, err := p.Send(ctx, client.Job{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Wait(ctx)
	if err != nil {
		t.Fatalf("job: %v", err)
	}
	calls := s.recorded()
	if len(calls) != perJob+4 || res.Attempts != len(calls) {
		t.Fatalf("%d calls, %d attempts; want %d", len(calls), res.Attempts, perJob+4)
	}
	for i := perJob + 1; i < len(calls); i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap < callHint {
			t.Errorf("call %d came %s after a call refused with a hint of %s", i, gap, callHint)
		}
	}
}
