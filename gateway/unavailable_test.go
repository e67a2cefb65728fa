package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/faultqueue"
	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/metricstest"
	"github.com/sluice-dev/sluice/queue"
)

// submitOne sends one job by Submit or by a one-job SubmitBatch and returns
// the job's id, whether it was a duplicate, and its status code.
type submitOne func(ctx context.Context, c ingestv1.IngestServiceClient, req *ingestv1.SubmitRequest) (id string, dup bool, code codes.Code)

func bySubmit(ctx context.Context, c ingestv1.IngestServiceClient, req *ingestv1.SubmitRequest) (string, bool, codes.Code) {
	resp, err := c.Submit(ctx, req)
	return resp.GetJobId(), resp.GetDuplicate(), status.Code(err)
}

func bySubmitBatch(ctx context.Context, c ingestv1.IngestServiceClient, req *ingestv1.SubmitRequest) (string, bool, codes.Code) {
	resp, err := c.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{req}})
	if err != nil {
		return "", false, status.Code(err)
	}
	r := resp.GetResults()[0]
	if e := r.GetError(); e != nil {
		return "", false, codes.Code(e.GetCode())
	}
	return r.GetJobId(), r.GetDuplicate(), codes.OK
}

// TestUnavailableUndoesTokenAndReleasesKey fails every Send of the
// gateway's backend: each job is answered UNAVAILABLE, and neither its rate
// token nor its idempotency key stays taken. Once the backend works again,
// a retry with the same key is accepted as a new job, and the tenant still
// has its whole burst.
func TestUnavailableUndoesTokenAndReleasesKey(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		submit submitOne
	}{
		{"Submit", bySubmit},
		{"SubmitBatch", bySubmitBatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewPedanticRegistry()
			var fq *faultqueue.Backend
			tb := setupWrapped(t, Config{Metrics: metrics.New(reg, metrics.Options{})}, func(b queue.Backend) queue.Backend {
				fq = faultqueue.New(b)
				return fq
			})
			// tiny has a burst of 3 and refills one token in about 17 minutes.
			const burst = 3
			ctx := key(t.Context(), "tiny-key-1")
			retried := &ingestv1.SubmitRequest{Payload: []byte("order 7"), IdempotencyKey: "order-7"}

			fq.Sleep(faultqueue.OpSend)
			// One more attempt than the burst: were tokens kept by failed
			// sends, the last would be RESOURCE_EXHAUSTED; were the key
			// kept, a repeat would be answered as a duplicate.
			for i := range burst + 1 {
				if id, dup, code := tt.submit(ctx, tb.client, retried); code != codes.Unavailable || id != "" || dup {
					t.Fatalf("attempt %d with the backend down: id %q duplicate %v code %v, want UNAVAILABLE", i+1, id, dup, code)
				}
			}
			if got := fq.Failed(faultqueue.OpSend); got != burst+1 {
				t.Fatalf("the backend failed %d sends, want %d", got, burst+1)
			}

			fq.Wakeup()
			id, dup, code := tt.submit(ctx, tb.client, retried)
			if code != codes.OK || id == "" || dup {
				t.Fatalf("retry once the backend works: id %q duplicate %v code %v, want a new job", id, dup, code)
			}
			if again, dup, code := tt.submit(ctx, tb.client, retried); code != codes.OK || again != id || !dup {
				t.Fatalf("repeat of the stored job: id %q duplicate %v code %v, want a duplicate of %s", again, dup, code, id)
			}
			// The retry took one token; the rest of the burst is still there.
			for i := range burst - 1 {
				if _, _, code := tt.submit(ctx, tb.client, &ingestv1.SubmitRequest{Payload: []byte("more")}); code != codes.OK {
					t.Fatalf("job %d of the burst after the outage: %v", i+2, code)
				}
			}
			if _, _, code := tt.submit(ctx, tb.client, &ingestv1.SubmitRequest{Payload: []byte("one too many")}); code != codes.ResourceExhausted {
				t.Fatalf("job past the burst: %v, want RESOURCE_EXHAUSTED", code)
			}

			if stored := storedJobs(t, tb); stored != burst {
				t.Fatalf("%d jobs stored, want %d", stored, burst)
			}
			for outcome, want := range map[string]float64{
				metrics.OutcomeUnavailable:   burst + 1,
				metrics.OutcomeAdmitted:      burst,
				metrics.OutcomeDuplicate:     1,
				metrics.OutcomeThrottledRate: 1,
			} {
				if got := metricstest.CounterSum(t, reg, metrics.NameJobsSubmitted, map[string]string{"outcome": outcome}); got != want {
					t.Errorf("%s{outcome=%q} = %g, want %g", metrics.NameJobsSubmitted, outcome, got, want)
				}
			}
		})
	}
}

// storedJobs counts the messages on the backend's queues.
func storedJobs(t *testing.T, tb *testBundle) int64 {
	t.Helper()
	st, err := tb.backend.Stats(t.Context(), &queue.StatsParams{Queues: tb.topo.Names()})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range st {
		n += s.Visible + s.InFlight + s.Delayed
	}
	return n
}

// TestFailedSendsLogALine fails every Send of the gateway's backend: a
// failed Send is logged with its jobs counted, not once per job (a
// 500-job batch was 500 warnings), and failed Sends are logged once per
// ratelog.Every, the next line counting those left out: with the disk
// full every refused call logged a line (with gRPC's, two), on what is
// often the same disk (found by a tester).
func TestFailedSendsLogALine(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	var logs syncbuf.Buffer
	var fq *faultqueue.Backend
	tb := setupWrapped(t, Config{Now: now, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, func(b queue.Backend) queue.Backend {
		fq = faultqueue.New(b)
		return fq
	})
	fq.Sleep(faultqueue.OpSend)
	ctx := key(t.Context(), "bench-key-1")
	lines := func() []string {
		var out []string
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, `msg="enqueue failed"`) {
				out = append(out, l)
			}
		}
		return out
	}
	submit := func() error {
		_, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("x")})
		if status.Code(err) != codes.Unavailable {
			return fmt.Errorf("submit with the backend down: %w, want UNAVAILABLE", err)
		}
		return nil
	}
	steps := []struct {
		name    string
		advance time.Duration // the clock moves so before the step
		submit  func() error
		lines   int
	}{
		{"a batch of 100", 0, func() error {
			req := &ingestv1.SubmitBatchRequest{}
			for range 100 {
				req.Jobs = append(req.Jobs, &ingestv1.SubmitRequest{Payload: []byte("x")})
			}
			resp, err := tb.client.SubmitBatch(ctx, req)
			for i, r := range resp.GetResults() {
				if c := codes.Code(r.GetError().GetCode()); c != codes.Unavailable {
					return fmt.Errorf("job %d with the backend down: %v, want UNAVAILABLE", i, r)
				}
			}
			return err
		}, 1},
		{"5 submits at once", 0, func() error {
			for range 5 {
				if err := submit(); err != nil {
					return err
				}
			}
			return nil
		}, 1},
		{"a submit 9s later", 9 * time.Second, submit, 1},
		{"a submit 10s after the first", time.Second, submit, 2},
	}
	for _, st := range steps {
		clock.Add(int64(st.advance))
		if err := st.submit(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := lines(); len(got) != st.lines {
			t.Fatalf("after %s: %d lines, want %d:\n%s", st.name, len(got), st.lines, strings.Join(got, ""))
		}
	}
	sends := fq.Failed(faultqueue.OpSend)
	if want := fmt.Sprintf("suppressed_since_last_line=%d\n", sends-2); !strings.HasSuffix(lines()[1], want) {
		t.Errorf("second line %q: want it to count the %d failed sends between the lines (%s)", lines()[1], sends-2, want)
	}
}

// TestLateFailedSendGivesNoExtraBurst: tiny (burst 3, ~1 token per
// 1000 s) sends a batch of 3 whose send hangs and then fails. Meanwhile
// its bucket refills, and a batch of 3 is stored. The slow send's 3
// tokens, given back when it fails, must not come on top of the refilled
// bucket's: they stored 3 more jobs at the same instant, 6 in all against
// a burst of 3.
func TestLateFailedSendGivesNoExtraBurst(t *testing.T) {
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	var fq *faultqueue.Backend
	tb := setupWrapped(t, Config{Now: now}, func(b queue.Backend) queue.Backend {
		fq = faultqueue.New(b)
		return fq
	})
	// The first send (the slow batch's) hangs until released, then fails;
	// the others pass.
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	fq.Inject(func(c faultqueue.Call) error {
		if c.Op != faultqueue.OpSend || !first.CompareAndSwap(false, true) {
			return nil
		}
		close(entered)
		<-release
		return queue.ErrUnavailable
	})
	ctx := key(t.Context(), "tiny-key-1")
	batch := func(prefix string) *ingestv1.SubmitBatchRequest {
		req := &ingestv1.SubmitBatchRequest{}
		for i := range 3 {
			req.Jobs = append(req.Jobs, &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "%s-%d", prefix, i)})
		}
		return req
	}
	slowDone := make(chan error, 1)
	go func() {
		_, err := tb.client.SubmitBatch(ctx, batch("slow"))
		slowDone <- err
	}()
	<-entered
	clock.Add(int64(4000 * time.Second)) // the bucket refills meanwhile
	stored := 0
	count := func(resp *ingestv1.SubmitBatchResponse, err error) {
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetResults() {
			if r.GetError() == nil {
				stored++
			}
		}
	}
	count(tb.client.SubmitBatch(ctx, batch("a")))
	close(release)
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	count(tb.client.SubmitBatch(ctx, batch("b"))) // same instant
	if stored > 3 {
		t.Fatalf("%d jobs stored at one instant by a tenant with burst 3 (rate 0.001/s)", stored)
	}
}

// TestUnavailableSaysWhenToRetry: a job the backend could not store is
// answered UNAVAILABLE with a RetryInfo of unavailableRetry, by Submit in
// the status and by SubmitBatch in the job's result, so that clients back
// off instead of spinning against a full disk; it had none (found by a
// tester). A job the backend refuses as too large is INVALID_ARGUMENT,
// with none.
func TestUnavailableSaysWhenToRetry(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		sendErr   error
		wantCode  codes.Code
		wantRetry time.Duration // 0: no RetryInfo
	}{
		{"disk full", errors.New("commit: write queues.db.wal: no space left on device"), codes.Unavailable, time.Second},
		{"backend unavailable", queue.ErrUnavailable, codes.Unavailable, time.Second},
		{"body too large", queue.ErrBodyTooLarge, codes.InvalidArgument, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := setupWrapped(t, Config{}, func(b queue.Backend) queue.Backend {
				fq := faultqueue.New(b)
				fq.Inject(func(c faultqueue.Call) error {
					if c.Op == faultqueue.OpSend {
						return tt.sendErr
					}
					return nil
				})
				return fq
			})
			ctx := key(t.Context(), "bench-key-1")
			_, err := tb.client.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("x")})
			st := status.Convert(err)
			var retry time.Duration
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					retry = ri.GetRetryDelay().AsDuration()
				}
			}
			if st.Code() != tt.wantCode || retry != tt.wantRetry {
				t.Errorf("Submit: %v with RetryInfo %s, want %v with %s", st.Code(), retry, tt.wantCode, tt.wantRetry)
			}
			resp, err := tb.client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: []*ingestv1.SubmitRequest{{Payload: []byte("a")}, {Payload: []byte("b")}}})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range resp.GetResults() {
				je := r.GetError()
				if codes.Code(je.GetCode()) != tt.wantCode || je.GetRetryDelay().AsDuration() != tt.wantRetry || (tt.wantRetry == 0) != (je.GetRetryDelay() == nil) {
					t.Errorf("SubmitBatch job %d: %v, want code %v with retry delay %s", i, je, tt.wantCode, tt.wantRetry)
				}
			}
		})
	}
}
