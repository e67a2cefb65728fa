package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// JobResult is the outcome of one job of a SubmitBatch.
type JobResult struct {
	// JobID and Duplicate are set when the job was accepted (Err is nil).
	JobID     string
	Duplicate bool
	// IdempotencyKey is the key the job was sent with (generated if the
	// job had none): resubmitting the job with it within the gateway's
	// idempotency window cannot enqueue it twice.
	IdempotencyKey string
	// Attempts is the number of calls that carried the job; 0 if it was
	// never sent.
	Attempts int
	// Err is nil when the job was accepted. Otherwise it is the last
	// refusal (*QuotaError, *BacklogError, *InvalidArgumentError) or call
	// failure. After a failure of the whole call (UNAVAILABLE,
	// DEADLINE_EXCEEDED, a cancelled context) the job may have been stored
	// all the same: resubmit it with IdempotencyKey to be sure.
	Err error
}

// BatchError is SubmitBatch's error when some jobs were not accepted; the
// per-job results say which. errors.As and errors.Is look through it at
// every failed job's error.
type BatchError struct {
	// Failed of Total jobs were not accepted.
	Failed, Total int
	errs          []error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("sluice: %d of %d jobs not accepted; first: %v", e.Failed, e.Total, e.errs[0])
}

// Unwrap returns the error of each job that was not accepted.
func (e *BatchError) Unwrap() []error { return e.errs }

// SubmitBatch sends jobs in as few calls as the gateway's limits allow
// (Config.MaxBatchJobs jobs and Config.MaxBatchBytes per call, one call at
// a time) and returns one result per job, in order. Jobs refused with a
// retryable status are retried on their own, with the same idempotency
// keys, as Submit does; a retryable failure of a whole call retries all of
// its jobs.
//
// Jobs refused for the tenant's submit rate wait the gateway's hint once
// per refused job, since each needs a token of its own. The gateway admits
// at most the tenant's burst in one instant, so a batch much larger than
// the burst takes several rounds, each an attempt for the jobs still
// refused: send batches no larger than the burst (Config.MaxBatchJobs) or
// raise Config.MaxAttempts.
//
// The error is nil when every job was accepted, else a *BatchError. Once
// ctx ends, the jobs not yet sent are not sent; their Err wraps ctx.Err().
func (c *Client) SubmitBatch(ctx context.Context, jobs []Job) ([]JobResult, error) {
	results := make([]JobResult, len(jobs))
	reqs := make([]*ingestv1.SubmitRequest, len(jobs))
	for i := range jobs {
		reqs[i] = jobs[i].request()
		results[i].IdempotencyKey = reqs[i].GetIdempotencyKey()
	}
	for _, chunk := range c.chunks(reqs) {
		if err := ctx.Err(); err != nil {
			for _, i := range chunk {
				results[i].Err = fmt.Errorf("sluice: job not sent: %w", err)
			}
			continue
		}
		c.submitChunk(ctx, chunk, reqs, results)
	}
	var errs []error
	for _, r := range results {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	if len(errs) > 0 {
		return results, &BatchError{Failed: len(errs), Total: len(jobs), errs: errs}
	}
	return results, nil
}

// chunks splits the job indices into calls of at most MaxBatchJobs jobs
// and MaxBatchBytes encoded bytes (a job larger than that goes alone).
func (c *Client) chunks(reqs []*ingestv1.SubmitRequest) [][]int {
	var out [][]int
	var cur []int
	size := 0
	for i, r := range reqs {
		n := proto.Size(r) + 8 // field tag and length prefix in the batch
		if len(cur) > 0 && (len(cur) == c.cfg.MaxBatchJobs || size+n > c.cfg.MaxBatchBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, i)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// submitChunk sends the jobs at idx, retrying those refused with a
// retryable status, and records each outcome in results.
func (c *Client) submitChunk(ctx context.Context, idx []int, reqs []*ingestv1.SubmitRequest, results []JobResult) {
	pending := idx
	for attempt := 1; ; attempt++ {
		batch := &ingestv1.SubmitBatchRequest{Jobs: make([]*ingestv1.SubmitRequest, len(pending))}
		for k, i := range pending {
			batch.Jobs[k] = reqs[i]
			results[i].Attempts = attempt
		}
		resp, err := c.submitBatchOnce(ctx, batch)
		var retry []int
		var wait, rateHint time.Duration
		rateRefused := 0
		settle := func(i int, err error) {
			results[i].Err = err
			w, ok := c.retryWait(ctx, err, attempt)
			if !ok {
				return
			}
			retry = append(retry, i)
			wait = max(wait, w)
			if q := (*QuotaError)(nil); errors.As(err, &q) {
				rateRefused++
				rateHint = max(rateHint, q.RetryAfter)
			}
		}
		switch {
		case err != nil:
			for _, i := range pending {
				settle(i, err)
			}
		case len(resp.GetResults()) != len(pending):
			err := status.Errorf(codes.Internal, "gateway answered %d results for %d jobs; their outcome is unknown", len(resp.GetResults()), len(pending))
			for _, i := range pending {
				results[i].Err = err
			}
		default:
			for k, r := range resp.GetResults() {
				i := pending[k]
				if je := r.GetError(); je != nil {
					settle(i, fromStatus(jobStatus(je)))
					continue
				}
				results[i].JobID, results[i].Duplicate, results[i].Err = r.GetJobId(), r.GetDuplicate(), nil
			}
		}
		if len(retry) == 0 {
			return
		}
		wait = c.paceRate(ctx, wait, rateHint, rateRefused)
		if werr := sleep(ctx, wait); werr != nil {
			for _, i := range retry {
				results[i].Err = fmt.Errorf("sluice: %w while waiting %s to retry after: %w", werr, wait.Round(time.Millisecond), results[i].Err)
			}
			return
		}
		pending = retry
	}
}

// paceRate lengthens the wait before retrying n jobs refused for the
// tenant's rate. The gateway's hint is the time until one token is
// available, and each job needs its own, so n jobs wait n hints (a little
// less if the hint covered part of a token), within MaxRetryWait and the
// context's deadline; otherwise nearly all of them would be refused again.
func (c *Client) paceRate(ctx context.Context, wait, hint time.Duration, n int) time.Duration {
	if n < 2 {
		return wait
	}
	paced := min(hinted(hint*time.Duration(n)), c.cfg.MaxRetryWait)
	if d, ok := ctx.Deadline(); ok && time.Until(d) < paced {
		return wait
	}
	return max(wait, paced)
}

func (c *Client) submitBatchOnce(ctx context.Context, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
	attemptCtx, cancel := c.attemptContext(ctx)
	defer cancel()
	resp, err := c.rpc.SubmitBatch(attemptCtx, req)
	if err != nil {
		return nil, callError(ctx, attemptCtx, err)
	}
	return resp, nil
}
