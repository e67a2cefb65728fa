package client

import (
	"context"
	"fmt"
	"slices"
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
// Jobs refused for the tenant's submit rate are each told the time of a
// token of their own, and each is retried at its time (jobs whose times
// have come when a call is made share it), so a batch larger than the
// tenant's burst is paced at the tenant's rate.
//
// The error is nil when every job was accepted, else a *BatchError. Once
// ctx ends, the jobs not yet sent are not sent; their Err wraps ctx.Err().
func (c *Client) SubmitBatch(ctx context.Context, jobs []Job) ([]JobResult, error) {
	results := make([]JobResult, len(jobs))
	reqs := make([]*ingestv1.SubmitRequest, len(jobs))
	for i := range jobs {
		reqs[i] = jobs[i].request()
		results[i].IdempotencyKey = reqs[i].GetIdempotencyKey()
		if err := checkRequest(reqs[i]); err != nil { // refused alone, never sent
			results[i].Err = fmt.Errorf("sluice: job not sent: %w", err)
			reqs[i] = nil
		}
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
// and MaxBatchBytes encoded bytes (a job larger than that goes alone),
// leaving out the nil requests (jobs refused before sending).
func (c *Client) chunks(reqs []*ingestv1.SubmitRequest) [][]int {
	var out [][]int
	var cur []int
	size := 0
	for i, r := range reqs {
		if r == nil {
			continue
		}
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
// retryable status, and records each outcome in results. A refused job is
// retried at its own time: the gateway tells jobs refused for the tenant's
// rate the times of successive future tokens, so each call carries the jobs
// whose time has come.
func (c *Client) submitChunk(ctx context.Context, idx []int, reqs []*ingestv1.SubmitRequest, results []JobResult) {
	type waiting struct {
		i   int
		due time.Time
	}
	pending := idx
	var later []waiting // sorted by due
	for {
		batch := &ingestv1.SubmitBatchRequest{Jobs: make([]*ingestv1.SubmitRequest, len(pending))}
		for k, i := range pending {
			batch.Jobs[k] = reqs[i]
			results[i].Attempts++
		}
		resp, err := c.submitBatchOnce(ctx, batch)
		now := time.Now()
		settle := func(i int, err error) {
			results[i].Err = err
			if w, ok := c.retryWait(ctx, err, results[i].Attempts); ok {
				later = append(later, waiting{i, now.Add(w)})
			}
		}
		switch {
		case err != nil:
			// The whole call failed: its jobs retry together, after one wait.
			w := c.callRetryWait(ctx, err, func(yield func(int) bool) {
				for _, i := range pending {
					if !yield(results[i].Attempts) {
						return
					}
				}
			})
			for _, i := range pending {
				results[i].Err = err
				if _, ok := c.retryWait(ctx, err, results[i].Attempts); ok {
					later = append(later, waiting{i, now.Add(w)})
				}
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
		if len(later) == 0 {
			return
		}
		slices.SortStableFunc(later, func(a, b waiting) int { return a.due.Compare(b.due) })
		wait := time.Until(later[0].due)
		if werr := sleep(ctx, wait); werr != nil {
			for _, w := range later {
				results[w.i].Err = fmt.Errorf("sluice: %w while waiting %s to retry after: %w", werr, time.Until(w.due).Round(time.Millisecond), results[w.i].Err)
			}
			return
		}
		now = time.Now()
		pending = pending[:0:0]
		for len(later) > 0 && !later[0].due.After(now) && len(pending) < len(idx) {
			pending = append(pending, later[0].i)
			later = later[1:]
		}
	}
}

func (c *Client) submitBatchOnce(ctx context.Context, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
	if c.closed.Load() {
		return nil, ErrClientClosed
	}
	attemptCtx, cancel := c.attemptContext(ctx)
	defer cancel()
	resp, err := c.rpc.SubmitBatch(attemptCtx, req)
	if err != nil {
		return nil, c.failed(ctx, attemptCtx, err)
	}
	return resp, nil
}
