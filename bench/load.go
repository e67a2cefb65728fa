package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// PayloadBytes is the size of each job's payload: a small event, about
// the 200-byte message of the gRPC ceiling in shared/MEASURED.md.
const PayloadBytes = 200

// Client submits jobs through the ingest API on one connection.
type Client struct {
	conn    *grpc.ClientConn
	api     ingestv1.IngestServiceClient
	payload []byte
}

// Dial connects to an ingest API (the gateway, or the bare server).
func Dial(addr string) (*Client, error) {
	conn, err := testcluster.Dial(addr)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, api: ingestv1.NewIngestServiceClient(conn), payload: benchPayload()}, nil
}

// benchPayload returns a payload of PayloadBytes letters.
func benchPayload() []byte {
	payload := make([]byte, PayloadBytes)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	return payload
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

var withKey = testcluster.WithKey

// Submit submits one job as t. It waits for the connection to be ready,
// so a gateway restarting on the same address delays calls rather than
// failing them.
func (c *Client) Submit(ctx context.Context, t Tenant) error {
	_, err := c.SubmitID(ctx, t)
	return err
}

// SubmitID is Submit returning the job's id.
func (c *Client) SubmitID(ctx context.Context, t Tenant) (string, error) {
	resp, err := c.api.Submit(withKey(ctx, t.Key), &ingestv1.SubmitRequest{Payload: c.payload}, grpc.WaitForReady(true))
	return resp.GetJobId(), err
}

// SubmitBatch submits n jobs in one call as t and returns how many were
// accepted; err is the first refusal's message, if any.
func (c *Client) SubmitBatch(ctx context.Context, t Tenant, n int) (int, error) {
	jobs := make([]*ingestv1.SubmitRequest, n)
	for i := range jobs {
		jobs[i] = &ingestv1.SubmitRequest{Payload: c.payload}
	}
	resp, err := c.api.SubmitBatch(withKey(ctx, t.Key), &ingestv1.SubmitBatchRequest{Jobs: jobs}, grpc.WaitForReady(true))
	if err != nil {
		return 0, err
	}
	ok := 0
	for _, r := range resp.GetResults() {
		if r.GetError() == nil {
			ok++
		} else if err == nil {
			err = fmt.Errorf("job refused: code %d: %s", r.GetError().GetCode(), r.GetError().GetMessage())
		}
	}
	return ok, err
}

// LoadResult is what a load run measured.
type LoadResult struct {
	OK, Errors int
	FirstErr   error
	Elapsed    time.Duration
	Latencies  []time.Duration // of successful calls
	Units      int             // jobs accepted (a batch call counts its jobs)
}

// Rate returns successful calls per second.
func (r LoadResult) Rate() float64 { return Ratio(float64(r.OK), r.Elapsed.Seconds()) }

// UnitRate returns accepted jobs per second.
func (r LoadResult) UnitRate() float64 { return Ratio(float64(r.Units), r.Elapsed.Seconds()) }

// Call is one request of a load run; it returns the jobs it got accepted.
// Returning errDone ends the calling goroutine's loop.
type Call func(ctx context.Context, worker, i int) (int, error)

// errDone tells ClosedLoop that a goroutine has no more calls to make.
var errDone = errors.New("no more calls")

// recorder collects a load run's calls into a LoadResult.
type recorder struct {
	mu  sync.Mutex
	res LoadResult
	// noLatency keeps no latencies: a run that sees its answers only
	// some time after they came.
	noLatency bool
}

func (r *recorder) add(lat time.Duration, units int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.res.Errors++
		if r.res.FirstErr == nil {
			r.res.FirstErr = err
		}
		return
	}
	r.res.OK++
	r.res.Units += units
	if !r.noLatency {
		r.res.Latencies = append(r.res.Latencies, lat)
	}
}

// CallTimeout bounds each call of a load run (ClosedLoop, Paced): calls
// wait for the server to be ready, so without it a server that died
// would hang the run instead of failing its calls.
const CallTimeout = time.Minute

// ClosedLoop runs conc goroutines calling call back to back for warmup +
// dur, and records the calls started after the warmup. Each call is
// bounded by CallTimeout.
func ClosedLoop(ctx context.Context, conc int, warmup, dur time.Duration, call Call) LoadResult {
	return closedLoop(ctx, conc, warmup, dur, CallTimeout, call)
}

func closedLoop(ctx context.Context, conc int, warmup, dur, timeout time.Duration, call Call) LoadResult {
	var rec recorder
	start := time.Now()
	from, until := start.Add(warmup), start.Add(warmup+dur)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				if !t0.Before(until) {
					return
				}
				units, err := boundedCall(ctx, timeout, func(ctx context.Context) (int, error) { return call(ctx, w, i) })
				if errors.Is(err, errDone) {
					return
				}
				if !t0.Before(from) {
					rec.add(time.Since(t0), units, err)
				}
			}
		})
	}
	wg.Wait()
	rec.res.Elapsed = dur
	return rec.res
}

// boundedCall runs call with a context that ends after timeout.
func boundedCall(ctx context.Context, timeout time.Duration, call func(context.Context) (int, error)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return call(ctx)
}

// Stream is one open-loop source: Rate calls per second, each sent on
// schedule whatever the earlier ones are doing.
type Stream struct {
	Rate float64
	Call func(ctx context.Context) error
}

// PacedResult counts what a paced run sent.
type PacedResult struct {
	Sent, Errors int64
	FirstErr     error
	Latencies    []time.Duration // of successful calls, from their start
	Late         int64           // calls started more than 10 ms after their time
}

// Paced runs the streams open-loop for dur: call k of a stream starts at
// start + phase + k/Rate (or as soon as it can if the pacer falls behind,
// which Late counts), at most maxOutstanding calls at once in all. Each
// stream's phase is drawn at random within its period, as independent
// clients' are: streams that all fired at the same instants would arrive
// in bursts that no real set of tenants sends.
// Each call is bounded by CallTimeout.
func Paced(ctx context.Context, streams []Stream, dur time.Duration, maxOutstanding int) *PacedResult {
	return paced(ctx, streams, dur, maxOutstanding, CallTimeout)
}

func paced(ctx context.Context, streams []Stream, dur time.Duration, maxOutstanding int, timeout time.Duration) *PacedResult {
	var (
		res  PacedResult
		mu   sync.Mutex
		sent atomic.Int64
		late atomic.Int64
		wg   sync.WaitGroup
		sem  = make(chan struct{}, maxOutstanding)
	)
	start := time.Now()
	end := start.Add(dur)
	// Calls under way when ctx ends are let finish: only scheduling stops.
	callCtx := context.WithoutCancel(ctx)
	for _, s := range streams {
		if s.Rate <= 0 {
			continue
		}
		period := time.Duration(float64(time.Second) / s.Rate)
		phase := rand.N(period)
		wg.Go(func() {
			for k := 0; ; k++ {
				due := start.Add(phase + time.Duration(k)*period)
				if !due.Before(end) || ctx.Err() != nil {
					return
				}
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				t0 := time.Now()
				if t0.Sub(due) > 10*time.Millisecond {
					late.Add(1)
				}
				sent.Add(1)
				wg.Go(func() {
					defer func() { <-sem }()
					_, err := boundedCall(callCtx, timeout, func(ctx context.Context) (int, error) { return 0, s.Call(ctx) })
					lat := time.Since(t0)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						res.Errors++
						if res.FirstErr == nil {
							res.FirstErr = err
						}
						return
					}
					res.Latencies = append(res.Latencies, lat)
				})
			}
		})
	}
	wg.Wait()
	res.Sent, res.Late = sent.Load(), late.Load()
	return &res
}
