package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// scripted is a real IngestService on a loopback port that answers each
// call as its script says and records what it received. It is the peer:
// the client is what these tests exercise.
type scripted struct {
	ingestv1.UnimplementedIngestServiceServer
	addr string
	// submit and batch answer the n-th call (0-based) of each method.
	submit func(ctx context.Context, n int, req *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error)
	batch  func(ctx context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error)

	mu    sync.Mutex
	calls []call
}

type call struct {
	at   time.Time
	auth string
	keys []string // idempotency keys, one per job
}

func (s *scripted) record(ctx context.Context, reqs ...*ingestv1.SubmitRequest) int {
	md, _ := metadata.FromIncomingContext(ctx)
	c := call{at: time.Now(), auth: strings.Join(md.Get("authorization"), ",")}
	for _, r := range reqs {
		c.keys = append(c.keys, r.GetIdempotencyKey())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	return len(s.calls) - 1
}

func (s *scripted) Submit(ctx context.Context, req *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
	return s.submit(ctx, s.record(ctx, req), req)
}

func (s *scripted) SubmitBatch(ctx context.Context, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
	return s.batch(ctx, s.record(ctx, req.GetJobs()...), req)
}

func (s *scripted) recorded() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// serveScripted starts s on a loopback port with the given server options.
func serveScripted(t *testing.T, s *scripted, opts ...grpc.ServerOption) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	ingestv1.RegisterIngestServiceServer(srv, s)
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(done) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	s.addr = lis.Addr().String()
}

// Statuses as the gateway sends them (gateway/status.go).
func quotaStatus(subject string, retry time.Duration) *status.Status {
	st, err := status.New(codes.ResourceExhausted, "refused").WithDetails(
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: subject + ":t1", Description: "refused"}}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	if err != nil {
		panic(err)
	}
	return st
}

func invalidStatus(field string) *status.Status {
	st, err := status.New(codes.InvalidArgument, "invalid job").WithDetails(&errdetails.BadRequest{
		FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: "must not be empty"}},
	})
	if err != nil {
		panic(err)
	}
	return st
}

var (
	errUnavailable = status.Error(codes.Unavailable, "job not stored: disk full")
	// errUnavailableHinted is the gateway's UNAVAILABLE, with its RetryInfo.
	errUnavailableHinted = func() error {
		st, err := status.New(codes.Unavailable, "job not stored: disk full").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		if err != nil {
			panic(err)
		}
		return st.Err()
	}()
	errRate    = func(d time.Duration) error { return quotaStatus("rate", d).Err() }
	errBacklog = func(d time.Duration) error { return quotaStatus("lane_backlog", d).Err() }
)

// answerSubmit answers the n-th Submit with errs[n] (the last one repeats);
// nil answers OK with job id "job-<n>".
func answerSubmit(errs ...error) func(context.Context, int, *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
	return func(_ context.Context, n int, _ *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
		if err := errs[min(n, len(errs)-1)]; err != nil {
			return nil, err
		}
		return &ingestv1.SubmitResponse{JobId: fmt.Sprint("job-", n)}, nil
	}
}

// fastRetries keeps the backoff short; the waits asserted are lower bounds.
var fastRetries = client.Config{BackoffBase: 40 * time.Millisecond, BackoffMax: 200 * time.Millisecond}

func dial(t *testing.T, addr string, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = "test-key"
	}
	if cfg.TLS == nil {
		cfg.Insecure = true
	}
	c, err := client.New(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSubmitRetries(t *testing.T) {
	t.Parallel()
	isCode := func(want codes.Code) func(error) bool {
		return func(err error) bool { return status.Code(err) == want }
	}
	tests := []struct {
		name    string
		answers []error
		cfg     client.Config
		// wantCalls is the number of calls made; minGaps the least time
		// between consecutive calls.
		wantCalls int
		minGaps   []time.Duration
		wantErr   func(error) bool // nil: success
	}{
		{
			name: "over rate, then accepted", answers: []error{errRate(300 * time.Millisecond), nil},
			wantCalls: 2, minGaps: []time.Duration{300 * time.Millisecond},
		},
		{
			name: "lane backlog, then accepted", answers: []error{errBacklog(200 * time.Millisecond), nil},
			wantCalls: 2, minGaps: []time.Duration{200 * time.Millisecond},
		},
		{
			name: "unavailable twice, then accepted", answers: []error{errUnavailable, errUnavailable, nil},
			wantCalls: 3, minGaps: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond},
		},
		{
			name: "unavailable until the attempts run out", answers: []error{errUnavailable}, cfg: client.Config{MaxAttempts: 3},
			wantCalls: 3, wantErr: isCode(codes.Unavailable),
		},
		// The gateway's UNAVAILABLE carries a RetryInfo (1 s): the client
		// waits at least that long, and counts the attempts as without
		// one. It retried after its own 20-40 ms backoff, and used up its
		// attempts against a store that had said it needed a second.
		{
			name: "unavailable with a RetryInfo, then accepted", answers: []error{errUnavailableHinted, errUnavailableHinted, nil},
			wantCalls: 3, minGaps: []time.Duration{time.Second, time.Second},
		},
		// A hint past MaxRetryWait is waited up to MaxRetryWait, and the
		// job is still retried: UNAVAILABLE is worth retrying.
		{
			name: "unavailable with a RetryInfo past MaxRetryWait until the attempts run out", answers: []error{errUnavailableHinted},
			cfg:       client.Config{MaxAttempts: 3, MaxRetryWait: 100 * time.Millisecond},
			wantCalls: 3, minGaps: []time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, wantErr: func(err error) bool {
				var q *client.QuotaError
				var b *client.BacklogError
				return status.Code(err) == codes.Unavailable && !errors.As(err, &q) && !errors.As(err, &b)
			},
		},
		{
			name: "invalid argument is not retried", answers: []error{invalidStatus("payload").Err()},
			wantCalls: 1, wantErr: func(err error) bool {
				var inv *client.InvalidArgumentError
				return errors.As(err, &inv) && inv.Violations[0].Field == "payload" && status.Code(err) == codes.InvalidArgument
			},
		},
		{
			name: "unauthenticated is not retried", answers: []error{status.Error(codes.Unauthenticated, "unknown API key")},
			wantCalls: 1, wantErr: isCode(codes.Unauthenticated),
		},
		{
			name: "permission denied is not retried", answers: []error{status.Error(codes.PermissionDenied, "no")},
			wantCalls: 1, wantErr: isCode(codes.PermissionDenied),
		},
		{
			name: "resource exhausted without RetryInfo is not retried", answers: []error{status.Error(codes.ResourceExhausted, "message too large")},
			wantCalls: 1, wantErr: isCode(codes.ResourceExhausted),
		},
		{
			name: "a hint beyond MaxRetryWait is returned at once", answers: []error{errRate(time.Minute)}, cfg: client.Config{MaxRetryWait: time.Second},
			wantCalls: 1, wantErr: func(err error) bool {
				var q *client.QuotaError
				return errors.As(err, &q) && q.RetryAfter == time.Minute && q.Subject == "rate:t1"
			},
		},
		{
			name: "MaxAttempts 1 turns retries off", answers: []error{errUnavailable, nil}, cfg: client.Config{MaxAttempts: 1},
			wantCalls: 1, wantErr: isCode(codes.Unavailable),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &scripted{submit: answerSubmit(tt.answers...)}
			serveScripted(t, s)
			cfg := tt.cfg
			cfg.BackoffBase, cfg.BackoffMax = fastRetries.BackoffBase, fastRetries.BackoffMax
			res, err := dial(t, s.addr, cfg).Submit(t.Context(), client.Job{Payload: []byte("x")})
			calls := s.recorded()
			if len(calls) != tt.wantCalls {
				t.Fatalf("%d calls, want %d (err %v)", len(calls), tt.wantCalls, err)
			}
			for i, c := range calls {
				if c.keys[0] == "" || c.keys[0] != calls[0].keys[0] {
					t.Errorf("call %d sent idempotency key %q, want the first call's %q", i, c.keys[0], calls[0].keys[0])
				}
				if c.auth != "Bearer test-key" {
					t.Errorf("call %d authorization %q", i, c.auth)
				}
			}
			for i, gap := range tt.minGaps {
				if got := calls[i+1].at.Sub(calls[i].at); got < gap {
					t.Errorf("call %d came %s after the previous, want at least %s", i+1, got, gap)
				}
			}
			if tt.wantErr == nil {
				if err != nil || res.Attempts != tt.wantCalls || res.IdempotencyKey != calls[0].keys[0] || res.JobID != fmt.Sprint("job-", tt.wantCalls-1) {
					t.Fatalf("got %+v, %v", res, err)
				}
			} else if err == nil || !tt.wantErr(err) {
				t.Fatalf("err = %v, not the expected one", err)
			}
		})
	}
}

func TestSubmitKeepsGivenKey(t *testing.T) {
	t.Parallel()
	s := &scripted{submit: answerSubmit(errUnavailable, nil)}
	serveScripted(t, s)
	res, err := dial(t, s.addr, fastRetries).Submit(t.Context(), client.Job{Payload: []byte("x"), IdempotencyKey: "order-42"})
	if err != nil {
		t.Fatal(err)
	}
	calls := s.recorded()
	if res.IdempotencyKey != "order-42" || calls[0].keys[0] != "order-42" || calls[1].keys[0] != "order-42" {
		t.Fatalf("result %+v, calls %+v: want key order-42 throughout", res, calls)
	}
}

// TestSubmitContextEnds checks that the caller's context bounds the
// retries: cancelled during a wait, or too short for the wait asked.
func TestSubmitContextEnds(t *testing.T) {
	t.Parallel()
	t.Run("cancelled while waiting", func(t *testing.T) {
		t.Parallel()
		s := &scripted{submit: answerSubmit(errRate(20 * time.Second))}
		serveScripted(t, s)
		ctx, cancel := context.WithCancel(t.Context())
		// Cancel 100ms after the refusal, in the 20s wait it asks for; a
		// fixed 100ms from the start cancelled the call itself on a busy
		// machine.
		go func() {
			for deadline := time.Now().Add(10 * time.Second); len(s.recorded()) == 0 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		start := time.Now()
		_, err := dial(t, s.addr, client.Config{}).Submit(ctx, client.Job{Payload: []byte("x")})
		var q *client.QuotaError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &q) {
			t.Fatalf("err = %v, want context.Canceled and the QuotaError that caused the wait", err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("returned after %s: the cancel did not end the wait", took)
		}
		if n := len(s.recorded()); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
	})
	t.Run("deadline before the hint", func(t *testing.T) {
		t.Parallel()
		s := &scripted{submit: answerSubmit(errBacklog(20 * time.Second))}
		serveScripted(t, s)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := dial(t, s.addr, client.Config{}).Submit(ctx, client.Job{Payload: []byte("x")})
		var b *client.BacklogError
		if !errors.As(err, &b) || b.RetryAfter != 20*time.Second {
			t.Fatalf("err = %v, want the BacklogError", err)
		}
		if ctx.Err() != nil {
			t.Fatal("Submit waited until the deadline instead of returning at once")
		}
	})
	t.Run("call outlives the context", func(t *testing.T) {
		t.Parallel()
		s := &scripted{submit: func(ctx context.Context, _ int, _ *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}}
		serveScripted(t, s)
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, err := dial(t, s.addr, client.Config{}).Submit(ctx, client.Job{Payload: []byte("x")})
		if !errors.Is(err, context.DeadlineExceeded) || status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
		if n := len(s.recorded()); n != 1 {
			t.Fatalf("%d calls, want 1", n)
		}
	})
}

// TestAttemptTimeout: an attempt that times out is retried with the same
// key while the caller's context lives.
func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	s := &scripted{submit: func(ctx context.Context, n int, _ *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
		if n == 0 {
			<-ctx.Done() // the first attempt hangs until the client gives up on it
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return &ingestv1.SubmitResponse{JobId: "job-1", Duplicate: true}, nil
	}}
	serveScripted(t, s)
	cfg := fastRetries
	cfg.AttemptTimeout = 200 * time.Millisecond
	res, err := dial(t, s.addr, cfg).Submit(t.Context(), client.Job{Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	calls := s.recorded()
	if res.Attempts != 2 || len(calls) != 2 || calls[0].keys[0] != calls[1].keys[0] || !res.Duplicate {
		t.Fatalf("result %+v after calls %+v", res, calls)
	}
}

// batchAnswer builds a SubmitBatchResponse: nil accepts a job as
// "<key>-id", an error refuses it with that status.
func batchAnswer(req *ingestv1.SubmitBatchRequest, errs ...*status.Status) *ingestv1.SubmitBatchResponse {
	resp := &ingestv1.SubmitBatchResponse{}
	for i, j := range req.GetJobs() {
		var st *status.Status
		if i < len(errs) {
			st = errs[i]
		}
		if st == nil {
			resp.Results = append(resp.Results, &ingestv1.SubmitBatchResult{JobId: j.GetIdempotencyKey() + "-id"})
			continue
		}
		je := &ingestv1.JobError{Code: uint32(st.Code()), Message: st.Message()}
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				je.RetryDelay = d.GetRetryDelay()
			case *errdetails.BadRequest:
				for _, v := range d.GetFieldViolations() {
					je.FieldViolations = append(je.FieldViolations, &ingestv1.FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
				}
			}
		}
		resp.Results = append(resp.Results, &ingestv1.SubmitBatchResult{Error: je})
	}
	return resp
}

// TestSubmitBatchPerJob: of three jobs, one is accepted, one is over rate
// and retried alone with its key, one is invalid and reported as such.
func TestSubmitBatchPerJob(t *testing.T) {
	t.Parallel()
	s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		if n == 0 {
			return batchAnswer(req, nil, quotaStatus("rate", 200*time.Millisecond), invalidStatus("jobs[2].payload")), nil
		}
		return batchAnswer(req), nil
	}}
	serveScripted(t, s)
	jobs := []client.Job{{Payload: []byte("a")}, {Payload: []byte("b"), IdempotencyKey: "b-key"}, {Payload: []byte("c")}}
	results, err := dial(t, s.addr, fastRetries).SubmitBatch(t.Context(), jobs)

	calls := s.recorded()
	if len(calls) != 2 || len(calls[1].keys) != 1 || calls[1].keys[0] != "b-key" {
		t.Fatalf("calls %+v: want a retry of job 1 alone with key b-key", calls)
	}
	if gap := calls[1].at.Sub(calls[0].at); gap < 200*time.Millisecond {
		t.Errorf("retry after %s, want at least the 200ms asked", gap)
	}
	if r := results[0]; r.Err != nil || r.JobID != calls[0].keys[0]+"-id" || r.Attempts != 1 {
		t.Errorf("job 0: %+v", r)
	}
	if r := results[1]; r.Err != nil || r.JobID != "b-key-id" || r.Attempts != 2 {
		t.Errorf("job 1: %+v", r)
	}
	var inv *client.InvalidArgumentError
	if r := results[2]; !errors.As(r.Err, &inv) || inv.Violations[0].Field != "payload" || r.JobID != "" || r.Attempts != 1 {
		t.Errorf("job 2: %+v, want an InvalidArgumentError on payload", r)
	}
	var be *client.BatchError
	if !errors.As(err, &be) || be.Failed != 1 || be.Total != 3 || !errors.As(err, &inv) {
		t.Fatalf("err = %v, want a BatchError of 1 of 3 exposing the InvalidArgumentError", err)
	}
}

func TestSubmitBatchSplits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		jobs      int
		payload   int
		cfg       client.Config
		wantSizes []int
	}{
		{name: "by job count", jobs: 1201, payload: 10, wantSizes: []int{500, 500, 201}},
		{name: "by configured count", jobs: 5, payload: 10, cfg: client.Config{MaxBatchJobs: 2}, wantSizes: []int{2, 2, 1}},
		{name: "by bytes", jobs: 10, payload: 1000, cfg: client.Config{MaxBatchBytes: 3500}, wantSizes: []int{3, 3, 3, 1}},
		{name: "a job over the byte limit goes alone", jobs: 2, payload: 5000, cfg: client.Config{MaxBatchBytes: 3500}, wantSizes: []int{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &scripted{batch: func(_ context.Context, _ int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
				return batchAnswer(req), nil
			}}
			serveScripted(t, s)
			jobs := make([]client.Job, tt.jobs)
			for i := range jobs {
				jobs[i] = client.Job{Payload: make([]byte, tt.payload)}
			}
			results, err := dial(t, s.addr, tt.cfg).SubmitBatch(t.Context(), jobs)
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			var sent []string
			for _, c := range s.recorded() {
				sizes = append(sizes, len(c.keys))
				sent = append(sent, c.keys...)
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tt.wantSizes) {
				t.Fatalf("call sizes %v, want %v", sizes, tt.wantSizes)
			}
			for i, r := range results {
				if r.IdempotencyKey != sent[i] || r.JobID != sent[i]+"-id" {
					t.Fatalf("job %d: %+v, sent with key %q", i, r, sent[i])
				}
			}
		})
	}
}

// TestSubmitBatchCallFails: a whole call failing UNAVAILABLE is retried
// with every job's key unchanged; UNAUTHENTICATED fails every job at once.
func TestSubmitBatchCallFails(t *testing.T) {
	t.Parallel()
	t.Run("unavailable", func(t *testing.T) {
		t.Parallel()
		s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
			if n == 0 {
				return nil, errUnavailable
			}
			return batchAnswer(req), nil
		}}
		serveScripted(t, s)
		results, err := dial(t, s.addr, fastRetries).SubmitBatch(t.Context(), []client.Job{{Payload: []byte("a")}, {Payload: []byte("b")}})
		calls := s.recorded()
		if err != nil || len(calls) != 2 || fmt.Sprint(calls[0].keys) != fmt.Sprint(calls[1].keys) {
			t.Fatalf("err %v, calls %+v: want one retry with the same keys", err, calls)
		}
		for i, r := range results {
			if r.Attempts != 2 || r.JobID != calls[0].keys[i]+"-id" {
				t.Errorf("job %d: %+v", i, r)
			}
		}
	})
	t.Run("unauthenticated", func(t *testing.T) {
		t.Parallel()
		s := &scripted{batch: func(context.Context, int, *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
			return nil, status.Error(codes.Unauthenticated, "unknown API key")
		}}
		serveScripted(t, s)
		results, err := dial(t, s.addr, fastRetries).SubmitBatch(t.Context(), []client.Job{{Payload: []byte("a")}, {Payload: []byte("b")}})
		if status.Code(err) != codes.Unauthenticated || len(s.recorded()) != 1 {
			t.Fatalf("err %v after %d calls, want UNAUTHENTICATED after 1", err, len(s.recorded()))
		}
		for i, r := range results {
			if status.Code(r.Err) != codes.Unauthenticated || r.JobID != "" {
				t.Errorf("job %d: %+v", i, r)
			}
		}
	})
	t.Run("wrong number of results", func(t *testing.T) {
		t.Parallel()
		s := &scripted{batch: func(_ context.Context, _ int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
			resp := batchAnswer(req)
			resp.Results = resp.Results[:1]
			return resp, nil
		}}
		serveScripted(t, s)
		results, err := dial(t, s.addr, fastRetries).SubmitBatch(t.Context(), []client.Job{{Payload: []byte("a")}, {Payload: []byte("b")}})
		if err == nil {
			t.Fatal("no error for a short answer")
		}
		for i, r := range results {
			if r.JobID != "" || status.Code(r.Err) != codes.Internal {
				t.Errorf("job %d: %+v, want no id and INTERNAL", i, r)
			}
		}
	})
}

// TestSubmitBatchCancelled: once the context ends, the remaining calls are
// not made and no job looks accepted that was not.
func TestSubmitBatchCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := &scripted{batch: func(_ context.Context, _ int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		cancel()
		return batchAnswer(req), nil
	}}
	serveScripted(t, s)
	jobs := make([]client.Job, 6)
	for i := range jobs {
		jobs[i] = client.Job{Payload: []byte("x")}
	}
	results, err := dial(t, s.addr, client.Config{MaxBatchJobs: 2}).SubmitBatch(ctx, jobs)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := len(s.recorded()); n != 1 {
		t.Fatalf("%d calls after the cancel, want only the first", n)
	}
	for i, r := range results {
		if (r.JobID == "") == (r.Err == nil) {
			t.Errorf("job %d: %+v: a job has either an id or an error", i, r)
		}
		if i >= 2 && (r.Attempts != 0 || !errors.Is(r.Err, context.Canceled)) {
			t.Errorf("job %d: %+v, want never sent, with context.Canceled", i, r)
		}
	}
}

// TestNewRejectsBadConfig: each bad setting is refused naming the field,
// and no error prints the API key (they printed the whole Config, which
// named no field; found by a tester).
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const key = "secret-api-key-1234"
	tests := []struct {
		name string
		cfg  client.Config
		want string
	}{
		{"no key", client.Config{}, "APIKey is required"},
		{"key with space", client.Config{APIKey: key + " x", Insecure: true}, "APIKey must not contain white space"},
		{"TLS and Insecure", client.Config{APIKey: key, Insecure: true, TLS: &tls.Config{}}, "set TLS or Insecure, not both"},
		{"attempts", client.Config{APIKey: key, Insecure: true, MaxAttempts: -1}, "MaxAttempts is -1: give 1 or more"},
		{"backoff base", client.Config{APIKey: key, Insecure: true, BackoffBase: -time.Second}, "BackoffBase is -1s"},
		{"backoff max", client.Config{APIKey: key, Insecure: true, BackoffBase: time.Second, BackoffMax: time.Millisecond}, "BackoffMax is 1ms, below BackoffBase (1s)"},
		{"retry wait", client.Config{APIKey: key, Insecure: true, MaxRetryWait: -time.Second}, "MaxRetryWait is -1s"},
		{"attempt timeout", client.Config{APIKey: key, Insecure: true, AttemptTimeout: -time.Second}, "AttemptTimeout is -1s"},
		{"batch jobs", client.Config{APIKey: key, Insecure: true, MaxBatchJobs: -1}, "MaxBatchJobs is -1: give 1 to 500"},
		{"batch bytes", client.Config{APIKey: key, Insecure: true, MaxBatchBytes: -1}, "MaxBatchBytes is -1"},
		{"two at once", client.Config{APIKey: key, Insecure: true, MaxAttempts: -1, MaxBatchJobs: -1}, "MaxAttempts is -1: give 1 or more (0 takes the default, 8); MaxBatchJobs is -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := client.New("127.0.0.1:1", tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("New: %v; it prints the API key", err)
			}
		})
	}
}

// TestNewProducerRejectsBadConfig: as TestNewRejectsBadConfig, for the
// producer's settings (it printed the whole ProducerConfig).
func TestNewProducerRejectsBadConfig(t *testing.T) {
	t.Parallel()
	const key = "secret-api-key-1234"
	c := dial(t, "127.0.0.1:1", client.Config{APIKey: key})
	tests := []struct {
		cfg  client.ProducerConfig
		want string
	}{
		{client.ProducerConfig{MaxBatchJobs: -1}, "MaxBatchJobs is -1: give 1 to 500"},
		{client.ProducerConfig{MaxBatchBytes: -1}, "MaxBatchBytes is -1"},
		{client.ProducerConfig{MaxInFlight: -1}, "MaxInFlight is -1: give 1 or more (0 takes the default, 8)"},
		{client.ProducerConfig{MaxPending: -1}, "MaxPending is -1"},
	}
	for _, tc := range tests {
		p, err := c.NewProducer(tc.cfg)
		if err == nil {
			p.Close(t.Context())
			t.Errorf("NewProducer(%+v) accepted it", tc.cfg)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), key) {
			t.Errorf("NewProducer(%+v): %v; want it to say %q, and not the API key", tc.cfg, err, tc.want)
		}
	}
}

// TestProducerBacksOffAfterAFailedCallWhoseFirstJobIsSpent: a whole call
// fails UNAVAILABLE while its first job has used its last attempt. The
// other jobs of the call still back off before their retry; the wait was
// taken from the first job alone, which is owed none, and they went again
// at once (found in review).
func TestProducerBacksOffAfterAFailedCallWhoseFirstJobIsSpent(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	s := &scripted{batch: func(_ context.Context, n int, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
		if n == 0 {
			close(entered)
			<-release
		}
		return nil, errUnavailable
	}}
	serveScripted(t, s)
	cfg := client.Config{MaxAttempts: 2, BackoffBase: 200 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	// b must join a's retry: it lingers behind the first call longer than
	// any answer takes (with the default 1ms, on a busy machine b left
	// alone before the first call's answer came back).
	p := newProducer(t, dial(t, s.addr, cfg), client.ProducerConfig{Linger: time.Minute})
	ctx := t.Context()
	a, err := p.Send(ctx, client.Job{Payload: []byte("a"), IdempotencyKey: "key-a"})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	b, err := p.Send(ctx, client.Job{Payload: []byte("b"), IdempotencyKey: "key-b"})
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	_, errA := a.Wait(ctx)
	_, errB := b.Wait(ctx)
	t.Logf("a: %v\nb: %v", errA, errB)
	calls := s.recorded()
	for i, c := range calls {
		gap := time.Duration(0)
		if i > 0 {
			gap = c.at.Sub(calls[i-1].at)
		}
		t.Logf("call %d %v after %v", i, c.keys, gap.Round(time.Millisecond))
	}
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3", len(calls))
	}
	if gap := calls[2].at.Sub(calls[1].at); gap < 100*time.Millisecond {
		t.Errorf("key-b retried %v after an UNAVAILABLE call, want a backoff of at least 100ms", gap.Round(time.Millisecond))
	}
}

// TestDefaultRetriesOutlastARestart: with the default Config, a Submit
// made while the gateway answers UNAVAILABLE for 3 s (as one restarting
// does) is accepted once it is back. The default of 5 attempts gave up
// after 0.75 to 1.5 s, and jobs submitted across a restart were refused
// (found in a walkthrough).
func TestDefaultRetriesOutlastARestart(t *testing.T) {
	t.Parallel()
	back := time.Now().Add(3 * time.Second)
	s := &scripted{submit: func(context.Context, int, *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
		if time.Now().Before(back) {
			return nil, errUnavailable
		}
		return &ingestv1.SubmitResponse{JobId: "j1"}, nil
	}}
	serveScripted(t, s)
	r, err := dial(t, s.addr, client.Config{}).Submit(t.Context(), client.Job{Payload: []byte("x")})
	if err != nil || r.JobID != "j1" {
		t.Fatalf("Submit across 3 s of UNAVAILABLE: %+v, %v; want it accepted", r, err)
	}
}
