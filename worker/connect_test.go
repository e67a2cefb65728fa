package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/worker"
)

// fakePull is a PullService whose streams run fn.
type fakePull struct {
	workerv1.UnimplementedPullServiceServer
	fn func(workerv1.PullService_ConnectServer) error
}

func (f *fakePull) Connect(s workerv1.PullService_ConnectServer) error { return f.fn(s) }

func startFake(t *testing.T, fn func(workerv1.PullService_ConnectServer) error, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	workerv1.RegisterPullServiceServer(srv, &fakePull{fn: fn})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func welcome(s workerv1.PullService_ConnectServer) error {
	if _, err := s.Recv(); err != nil { // Hello
		return err
	}
	return s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Welcome{Welcome: &workerv1.Welcome{Session: "s"}}})
}

func countStacks(sub string) int {
	buf := make([]byte, 1<<22)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), sub)
}

// TestReconnectsLeaveNoSender: each session's sender ends with its
// stream. A stream that broke left its sender blocked for ever, one
// goroutine per reconnect (found in review). Not parallel: it counts the
// senders of the whole process, and those of other tests' sessions were
// counted too (CI: "1 senders alive").
func TestReconnectsLeaveNoSender(t *testing.T) {
	var conns atomic.Int32
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		conns.Add(1)
		if err := welcome(s); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "bye")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, addr, "k", func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: quiet})
	}()
	time.Sleep(1500 * time.Millisecond)
	cancel()
	<-done
	deadline := time.Now().Add(2 * time.Second)
	for countStacks("(*puller).sendLoop") > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := countStacks("(*puller).sendLoop"); n > 0 || conns.Load() < 2 {
		t.Errorf("%d senders alive after %d sessions and Connect's return, want none (and at least 2 sessions)", n, conns.Load())
	}
}

// TestCancelBeforeWelcome: a server that accepts the stream and never
// answers Hello does not keep Connect from returning when ctx ends; it
// did, for ever (found in review).
func TestCancelBeforeWelcome(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		_, _ = s.Recv()
		<-block
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, addr, "k", func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: quiet})
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Errorf("Connect still running 3s after ctx was cancelled (waiting for Welcome)")
	}
}

// TestExtendAfterTheSession: Extend with a handler's context kept past
// its session does nothing; it sent on a closed channel and panicked
// (found in review).
func TestExtendAfterTheSession(t *testing.T) {
	t.Parallel()
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		_ = s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: "s.1", JobId: "j"}}}}})
		for {
			if _, err := s.Recv(); err != nil {
				return nil
			}
		}
	})
	var hctx context.Context
	got := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, addr, "k", func(c context.Context, _ worker.Job) error { hctx = c; close(got); return nil }, worker.ConnectOptions{Logger: quiet})
	}()
	<-got
	cancel()
	<-done
	var mu sync.Mutex
	panics := 0
	for range 20 {
		func() {
			defer func() {
				if recover() != nil {
					mu.Lock()
					panics++
					mu.Unlock()
				}
			}()
			worker.Extend(hctx, time.Second)
		}()
	}
	if panics > 0 {
		t.Errorf("worker.Extend panicked %d/20 times after the session ended", panics)
	}
}

// TestDrainTimeoutAnswers: when the drain runs out of time, the running
// handlers are cancelled. One that still finishes its job is acked, and
// one that gives up because of the cancellation is not answered at all, so
// the stream's end hands its job back with no attempt counted. Both raced
// the cancellation: the answer was sent or dropped at random, so a
// finished job was delivered again, or an interrupted one was counted as
// a failed attempt (found in review).
func TestDrainTimeoutAnswers(t *testing.T) {
	t.Parallel()
	const jobs = 20
	tests := []struct {
		name   string
		answer func(ctx context.Context) error
		want   map[workerv1.Outcome]int
	}{
		{"finished anyway", func(context.Context) error { return nil }, map[workerv1.Outcome]int{workerv1.Outcome_OUTCOME_ACK: jobs}},
		{"gave up", func(ctx context.Context) error { return ctx.Err() }, map[workerv1.Outcome]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan map[workerv1.Outcome]int, 1)
			addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
				if err := welcome(s); err != nil {
					return err
				}
				batch := &workerv1.Jobs{}
				for i := range jobs {
					batch.Jobs = append(batch.Jobs, &workerv1.Job{JobId: "j", Lease: "s." + strconv.Itoa(i)})
				}
				if err := s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: batch}}); err != nil {
					return err
				}
				outcomes := map[workerv1.Outcome]int{}
				defer func() { got <- outcomes }()
				for {
					m, err := s.Recv()
					if err != nil {
						return nil
					}
					for _, r := range m.GetResults().GetResults() {
						outcomes[r.GetOutcome()]++
					}
				}
			})
			var started sync.WaitGroup
			started.Add(jobs)
			handler := func(ctx context.Context, _ worker.Job) error {
				started.Done()
				<-ctx.Done() // the drain timeout
				return tt.answer(ctx)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- worker.Connect(ctx, addr, "k", handler, worker.ConnectOptions{Concurrency: jobs, DrainTimeout: 50 * time.Millisecond, Logger: quiet})
			}()
			started.Wait()
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var outcomes map[workerv1.Outcome]int
			select {
			case outcomes = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the stream did not end")
			}
			if !maps.Equal(outcomes, tt.want) {
				t.Errorf("answers sent %v, want %v", outcomes, tt.want)
			}
		})
	}
}

// blackhole is a TCP proxy to addr whose connections can be cut the way a
// crashed host or a network partition cuts them: no FIN, no RST, the
// bytes just stop arriving.
type blackhole struct {
	addr string
	mu   sync.Mutex
	cut  []*atomic.Bool // one per connection so far
}

func newBlackhole(t *testing.T, upstream string) *blackhole {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	b := &blackhole{addr: lis.Addr().String()}
	go func() {
		for {
			down, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = down.Close()
				continue
			}
			t.Cleanup(func() { _ = down.Close(); _ = up.Close() })
			cut := new(atomic.Bool)
			b.mu.Lock()
			b.cut = append(b.cut, cut)
			b.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						return
					}
					if !cut.Load() {
						if _, err := dst.Write(buf[:n]); err != nil {
							return
						}
					}
				}
			}
			go pipe(up, down)
			go pipe(down, up)
		}
	}()
	return b
}

// cutAll silences every connection made so far.
func (b *blackhole) cutAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.cut {
		c.Store(true)
	}
}

// TestReconnectsFromADeadConnection: when the sluice host dies without
// closing its connections (power loss, a partition), an idle worker
// notices by keepalive and reconnects. With no keepalive it waited on the
// dead stream for ever, taking no jobs from anyone (found in review).
func TestReconnectsFromADeadConnection(t *testing.T) {
	t.Parallel()
	sessions := make(chan struct{}, 10)
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		sessions <- struct{}{}
		for {
			if _, err := s.Recv(); err != nil {
				return nil
			}
		}
	})
	proxy := newBlackhole(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, proxy.addr, "k", func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: quiet, DrainTimeout: time.Second})
	}()
	defer func() { cancel(); <-done }()
	<-sessions
	proxy.cutAll()
	select {
	case <-sessions:
	case <-time.After(30 * time.Second): // about 11s with the tests' keepalive (export_test.go)
		t.Fatal("no new session within 30s of the connection going dead: the worker waits on it for ever")
	}
}

// nilErr is an error type whose Error panics on a nil pointer, as many
// do: a handler returning a nil *nilErr returns a non-nil error.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// TestHandlerErrorThatPanics: a handler's error whose Error method panics
// (a typed nil pointer, the classic) is a retry, as a panic in the handler
// is; it was formatted outside the recover and crashed the worker process
// with every job it held (found in review).
func TestHandlerErrorThatPanics(t *testing.T) {
	t.Parallel()
	got := make(chan *workerv1.Result, 1)
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		if err := s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: "s.1", JobId: "j"}}}}}); err != nil {
			return err
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			for _, r := range m.GetResults().GetResults() {
				got <- r
			}
		}
	})
	handler := func(context.Context, worker.Job) error {
		var e *nilErr
		return e
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Connect(ctx, addr, "k", handler, worker.ConnectOptions{Logger: quiet}) }()
	defer func() { cancel(); <-done }()
	select {
	case r := <-got:
		if r.GetOutcome() != workerv1.Outcome_OUTCOME_RETRY || !strings.Contains(r.GetError(), "panic") {
			t.Fatalf("answered %v, want a RETRY naming the panic", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer in 10s")
	}
}

// TestDrainRunsJobsInTransit: a job sluice sent just before it read the
// drain's Credits 0 arrives after the drain began; it is held by the
// stream all the same, so it is run and answered while the drain waits
// for the running ones. It was dropped, and sluice held it until the
// drain ended, then redelivered it (found in review).
func TestDrainRunsJobsInTransit(t *testing.T) {
	t.Parallel()
	outcomes := make(chan map[string]workerv1.Outcome, 1)
	release := make(chan struct{})
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		send := func(lease string) error {
			return s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: lease, JobId: lease}}}}})
		}
		if err := send("a"); err != nil {
			return err
		}
		got := map[string]workerv1.Outcome{}
		defer func() { outcomes <- got }()
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			if c := m.GetCredits(); c != nil && c.GetCredits() == 0 {
				// b was on its way when this Credits came; it arrives
				// once the drain waits for the running handlers.
				deadline := time.Now().Add(10 * time.Second)
				for countStacks("(*handlers).closeAndWait") == 0 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if err := send("b"); err != nil {
					return err
				}
			}
			for _, r := range m.GetResults().GetResults() {
				got[r.GetLease()] = r.GetOutcome()
			}
		}
	})
	started := make(chan struct{}, 2)
	handler := func(ctx context.Context, j worker.Job) error {
		started <- struct{}{}
		if j.ID == "b" {
			close(release) // a runs until b does
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done(): // the drain timed out
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, addr, "k", handler, worker.ConnectOptions{Concurrency: 2, DrainTimeout: 2 * time.Second, Logger: quiet})
	}()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-outcomes:
		want := map[string]workerv1.Outcome{"a": workerv1.Outcome_OUTCOME_ACK, "b": workerv1.Outcome_OUTCOME_ACK}
		if !maps.Equal(got, want) {
			t.Errorf("answers %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
}

// TestResultErrorNotUTF8: a handler's error that is not valid UTF-8 (a
// binary payload quoted in it, say) is answered, with the bad bytes
// replaced. The Result could not be encoded (protobuf strings must be
// UTF-8): the send failed, the stream broke with every answer in the
// batch lost, and the job was handed back with no attempt counted and
// failed the same way again, for ever.
func TestResultErrorNotUTF8(t *testing.T) {
	t.Parallel()
	var sessions atomic.Int32
	got := make(chan *workerv1.Result, 1)
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		sessions.Add(1)
		if err := welcome(s); err != nil {
			return err
		}
		if err := s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: "s.1", JobId: "j"}}}}}); err != nil {
			return err
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			for _, r := range m.GetResults().GetResults() {
				got <- r
			}
		}
	})
	handler := func(context.Context, worker.Job) error {
		return worker.RetryAfter(errors.New("bad record \xff\xfe"), time.Minute)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Connect(ctx, addr, "k", handler, worker.ConnectOptions{Logger: quiet}) }()
	defer func() { cancel(); <-done }()
	select {
	case r := <-got:
		if r.GetOutcome() != workerv1.Outcome_OUTCOME_RETRY || r.GetError() != "bad record \uFFFD" || r.GetDelay().AsDuration() != time.Minute {
			t.Errorf("answered %v, want a RETRY after 1m with the error's bad bytes replaced", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no answer in 5s (%d sessions): the result could not be sent", sessions.Load())
	}
}

// TestDrainTimeoutStuckHandler: a handler that ignores its cancelled
// context does not keep Connect from returning after a drain timed out:
// the stream closes, and sluice hands the job back. Connect waited for
// it for ever, so a SIGTERMed worker hung until it was killed.
func TestDrainTimeoutStuckHandler(t *testing.T) {
	t.Parallel()
	ended := make(chan error, 1)
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		if err := s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: "s.1", JobId: "j"}}}}}); err != nil {
			return err
		}
		for {
			m, err := s.Recv()
			if err != nil {
				ended <- err
				return nil
			}
			if rs := m.GetResults().GetResults(); len(rs) > 0 {
				ended <- fmt.Errorf("answered %v, want no answer for a job still running", rs)
			}
		}
	})
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	handler := func(context.Context, worker.Job) error {
		close(started)
		<-release // heedless of its context
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, addr, "k", handler, worker.ConnectOptions{DrainTimeout: 50 * time.Millisecond, Logger: quiet})
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		release <- struct{}{} // let Connect return
		<-done
		t.Fatal("Connect still draining 10s after ctx ended, with a DrainTimeout of 50ms")
	}
	select {
	case err := <-ended:
		if !errors.Is(err, io.EOF) {
			t.Errorf("the stream ended with %v, want the worker's clean close", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the stream did not end")
	}
}

// TestResultErrorTooLong: a handler's error longer than sluice takes in a
// message (a downloaded body quoted in it, say) is answered, cut short.
// The Results message went over sluice's limit: the stream broke with
// every answer in the batch lost, and the job was handed back with no
// attempt counted and failed the same way again, for ever.
func TestResultErrorTooLong(t *testing.T) {
	t.Parallel()
	var sessions atomic.Int32
	got := make(chan *workerv1.Result, 1)
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		sessions.Add(1)
		if err := welcome(s); err != nil {
			return err
		}
		if err := s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: "s.1", JobId: "j"}}}}}); err != nil {
			return err
		}
		for {
			m, err := s.Recv()
			if err != nil {
				return nil
			}
			for _, r := range m.GetResults().GetResults() {
				got <- r
			}
		}
	}, grpc.MaxRecvMsgSize(serve.MaxRecvMsgBytes)) // sluice's worker listener's limit
	body := strings.Repeat("é", serve.MaxRecvMsgBytes/2)
	handler := func(context.Context, worker.Job) error {
		return fmt.Errorf("upstream answered 502: %s", body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Connect(ctx, addr, "k", handler, worker.ConnectOptions{Logger: quiet}) }()
	defer func() { cancel(); <-done }()
	select {
	case r := <-got:
		e := r.GetError()
		if r.GetOutcome() != workerv1.Outcome_OUTCOME_RETRY || !strings.HasPrefix(e, "upstream answered 502: éé") || !strings.HasSuffix(e, "é…") || len(e) > 4<<10 {
			t.Errorf("answered %s with a %d-byte error ending %q, want a RETRY with the error cut to at most 4 KiB, marked", r.GetOutcome(), len(e), e[max(len(e)-8, 0):])
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no answer in 5s (%d sessions): the result could not be sent", sessions.Load())
	}
}

// TestPullVerdictWithoutCause: Permanent and RetryAfter with a nil error
// keep their verdicts in pull mode too: their Error panicked, so the job
// was answered as a panic, a RETRY with no delay.
func TestPullVerdictWithoutCause(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		give      error
		want      workerv1.Outcome
		wantDelay time.Duration
	}{
		{"Permanent(nil)", worker.Permanent(nil), workerv1.Outcome_OUTCOME_FAIL, 0},
		{"RetryAfter(nil, 3s)", worker.RetryAfter(nil, 3*time.Second), workerv1.Outcome_OUTCOME_RETRY, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan *workerv1.Result, 1)
			addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
				if err := welcome(s); err != nil {
					return err
				}
				if err := s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: "s.1", JobId: "j"}}}}}); err != nil {
					return err
				}
				for {
					m, err := s.Recv()
					if err != nil {
						return nil
					}
					for _, r := range m.GetResults().GetResults() {
						got <- r
					}
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- worker.Connect(ctx, addr, "k", func(context.Context, worker.Job) error { return tt.give }, worker.ConnectOptions{Logger: quiet})
			}()
			defer func() { cancel(); <-done }()
			select {
			case r := <-got:
				if r.GetOutcome() != tt.want || r.GetDelay().AsDuration() != tt.wantDelay || r.GetError() == "" {
					t.Fatalf("answered %v, want %v with a delay of %s and an error text", r, tt.want, tt.wantDelay)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no answer in 10s")
			}
		})
	}
}

// TestReturnWaitsForHandlers: Connect does not return while a handler of a
// stream that broke is still running: a handler that takes a moment to
// stop once cancelled finishes first. Connect returned at once when ctx
// ended during the reconnect's backoff, with the handler running on
// against whatever the caller closed next.
func TestReturnWaitsForHandlers(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		if err := s.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: []*workerv1.Job{{Lease: "s.1", JobId: "j"}}}}}); err != nil {
			return err
		}
		select {
		case <-started:
			return status.Error(codes.Unavailable, "sluice restarts")
		case <-s.Context().Done():
			return nil
		}
	})
	var once sync.Once
	cancelled := make(chan struct{})
	var finished atomic.Bool
	handler := func(ctx context.Context, _ worker.Job) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(started)
		<-ctx.Done() // the stream broke
		close(cancelled)
		time.Sleep(300 * time.Millisecond) // cleaning up
		finished.Store(true)
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Connect(ctx, addr, "k", handler, worker.ConnectOptions{Logger: quiet}) }()
	<-cancelled
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !finished.Load() {
		t.Error("Connect returned while the handler of the broken stream was still running")
	}
}

// TestConnectRefusesAKeyItCannotSend: a worker key gRPC cannot send as
// metadata (white space, control characters, anything but printable
// ASCII, such as the byte order mark an editor put at the start of the
// key's file) is refused up front. One outside ASCII passed the check,
// and Connect failed every stream with INTERNAL and retried for ever.
func TestConnectRefusesAKeyItCannotSend(t *testing.T) {
	t.Parallel()
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	})
	for _, key := range []string{"", "k ", "k\n", "k\x00", "k\x7f", "\ufeffk", "kéy"} {
		t.Run(strconv.Quote(key), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := worker.Connect(ctx, addr, key, func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: quiet})
			if err == nil || ctx.Err() != nil {
				t.Fatalf("Connect with key %q: %v after %v, want refused up front", key, err, ctx.Err())
			}
		})
	}
}

// TestConnectRefusesOptionsItCannotSend: a Name or a lane that is not
// valid UTF-8 cannot be put in the Hello (protobuf strings must be), so
// every session failed before it began and Connect retried for ever; it
// is refused up front, naming the option.
func TestConnectRefusesOptionsItCannotSend(t *testing.T) {
	t.Parallel()
	addr := startFake(t, func(s workerv1.PullService_ConnectServer) error {
		if err := welcome(s); err != nil {
			return err
		}
		<-s.Context().Done()
		return nil
	})
	for _, tt := range []struct {
		name string
		opts worker.ConnectOptions
		want string
	}{
		{"name", worker.ConnectOptions{Name: "w\xff"}, "Name"},
		{"lane", worker.ConnectOptions{Lanes: []string{"std", "gold\xc3"}}, "lane"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.opts.Logger = quiet
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			err := worker.Connect(ctx, addr, "k", func(context.Context, worker.Job) error { return nil }, tt.opts)
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Connect with %+v: %v after %v, want refused up front naming %s", tt.opts, err, ctx.Err(), tt.want)
			}
		})
	}
}

// TestConnectToAListenerWithoutTheWorkerAPI: an address that serves gRPC
// but not the worker API (sluice's ingest or admin listener, given by
// mistake) answers UNIMPLEMENTED, which no retry changes: Connect stops
// with ErrRefused naming the listener to use, instead of reconnecting for
// ever.
func TestConnectToAListenerWithoutTheWorkerAPI(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer() // serves no service at all
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = worker.Connect(ctx, lis.Addr().String(), "k", func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: quiet})
	if !errors.Is(err, worker.ErrRefused) || !strings.Contains(err.Error(), "--worker-listen") {
		t.Fatalf("Connect to a listener without the worker API: %v (ctx %v), want ErrRefused naming --worker-listen", err, ctx.Err())
	}
}

// TestReconnectsPromptlyAfterARestart: a worker whose sluice restarts on
// the same address reconnects within a few seconds of it being back. It
// took up to 10s and more: Connect's wait grew to 10s while sluice was
// down, and gRPC's own wait between dials (up to 2 minutes) failed the
// attempts in between fast.
func TestReconnectsPromptlyAfterARestart(t *testing.T) {
	t.Parallel()
	sessions := make(chan struct{}, 10)
	serve := func(addr string) (*grpc.Server, string) {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		workerv1.RegisterPullServiceServer(srv, &fakePull{fn: func(s workerv1.PullService_ConnectServer) error {
			if err := welcome(s); err != nil {
				return err
			}
			sessions <- struct{}{}
			for {
				if _, err := s.Recv(); err != nil {
					return nil
				}
			}
		}})
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return srv, lis.Addr().String()
	}
	srv, addr := serve("127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, addr, "k", func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: quiet})
	}()
	defer func() { cancel(); <-done }()
	<-sessions
	srv.Stop()
	time.Sleep(8 * time.Second) // down long enough for every wait to reach its longest
	serve(addr)
	back := time.Now()
	select {
	case <-sessions:
		t.Logf("reconnected %v after the server was back", time.Since(back).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("no new session within 30s of the server being back")
	}
	if took := time.Since(back); took > 5*time.Second {
		t.Errorf("reconnected %v after the server was back, want within 5s", took.Round(time.Millisecond))
	}
}

// TestRefusedKeyIsNotRetried: a key sluice refuses ends Connect after one
// attempt, with ErrRefused: however prompt reconnecting is, a worker with
// a bad key does not keep knocking.
func TestRefusedKeyIsNotRetried(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	addr := startFake(t, func(workerv1.PullService_ConnectServer) error {
		attempts.Add(1)
		return status.Error(codes.Unauthenticated, "unknown worker key")
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := worker.Connect(ctx, addr, "bad", func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: quiet})
	if !errors.Is(err, worker.ErrRefused) || attempts.Load() != 1 {
		t.Fatalf("Connect with a refused key: %v after %d attempts, want ErrRefused after 1", err, attempts.Load())
	}
}
