package reliability

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// StartWorker serves a recording worker on a loopback port until Stop.
// It holds each job a random share of maxDelay, so deliveries are in
// flight when a process is killed, and fails jobs as their kind (in the
// payload, see Ledger) asks: poison jobs are refused permanently
// (INVALID_ARGUMENT, so the drainer dead-letters them), doomed ones always
// fail with UNAVAILABLE (retried until the attempts run out), flaky ones
// fail their first attempt only.
func StartWorker(maxDelay time.Duration) (*testcluster.Worker, error) {
	return testcluster.StartWorker(func(ctx context.Context, req *workerv1.ProcessRequest, call int) error {
		if maxDelay > 0 && !periodic.Sleep(ctx, rand.N(maxDelay)) {
			return ctx.Err()
		}
		switch _, kind, _ := ParsePayload(string(req.GetPayload())); {
		case kind == KindPoison:
			return status.Error(codes.InvalidArgument, "poison job: refused for good")
		case kind == KindDoomed:
			return status.Error(codes.Unavailable, "doomed job: fails every attempt")
		case kind == KindFlaky && call == 1:
			return status.Error(codes.Unavailable, "flaky job: first attempt fails")
		}
		return nil
	})
}
