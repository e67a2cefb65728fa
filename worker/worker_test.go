package worker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/drainer"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
	"github.com/sluice-dev/sluice/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// serveWorker runs worker.Serve with h on a loopback port until the test
// ends and returns a connection to it.
func serveWorker(t *testing.T, cfg worker.Config) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = quiet
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Serve(ctx, lis, cfg) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return conn
}

// TestOutcomes delivers a job through the drainer's real gRPC worker
// client and checks that each handler result becomes the outcome the
// drainer acts on.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	isRetry := func(err error) bool { return err != nil && !drainer.IsPermanent(err) }
	tests := []struct {
		name      string
		handler   func() error
		wantOK    bool
		wantRetry bool
		wantAfter time.Duration // the least delay asked, for a retry
	}{
		{name: "nil acks", handler: func() error { return nil }, wantOK: true},
		{
			name: "RetryAfter retries no sooner than asked", handler: func() error { return worker.RetryAfter(errors.New("rate limited downstream"), 3*time.Second) },
			wantRetry: true, wantAfter: 3 * time.Second,
		},
		{
			// Its status could not be encoded with the RetryInfo (protobuf
			// strings must be UTF-8): the delay was dropped, and the job
			// came back after the drainer's backoff instead.
			name: "RetryAfter keeps its delay with an error that is not UTF-8", handler: func() error { return worker.RetryAfter(errors.New("bad record \xff"), 3*time.Second) },
			wantRetry: true, wantAfter: 3 * time.Second,
		},
		{name: "Permanent dead-letters", handler: func() error { return worker.Permanent(errors.New("bad payload")) }},
		{
			// Its status went over the trailer size the drainer reads, and
			// the call failed INTERNAL: a retry, for ever.
			name: "Permanent dead-letters with a 17 MiB error", handler: func() error { return worker.Permanent(errors.New(strings.Repeat("x", 17<<20))) },
		},
		{name: "a plain error retries with backoff", handler: func() error { return errors.New("database down") }, wantRetry: true},
		{name: "a status from another service is not passed on", handler: func() error {
			return fmt.Errorf("fetch customer: %w", status.Error(codes.NotFound, "no such customer"))
		}, wantRetry: true},
		{name: "a wrapped Permanent dead-letters", handler: func() error { return fmt.Errorf("step 2: %w", worker.Permanent(errors.New("schema"))) }},
		{name: "a panic retries", handler: func() error { panic("boom") }, wantRetry: true},
		// With no cause, their Error panicked: the handler's verdict was
		// lost, and the job was retried as after a panic, at once.
		{name: "Permanent(nil) dead-letters", handler: func() error { return worker.Permanent(nil) }},
		{
			name: "RetryAfter(nil) retries no sooner than asked", handler: func() error { return worker.RetryAfter(nil, 3*time.Second) },
			wantRetry: true, wantAfter: 3 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan worker.Job, 1)
			conn := serveWorker(t, worker.Config{Handler: func(_ context.Context, job worker.Job) error {
				got <- job
				return tt.handler()
			}})
			sent := &drainer.Job{
				ID: "01JOB", Tenant: "acme", Lane: "premium", Payload: []byte("payload"),
				Attributes: map[string]string{"kind": "email"}, Attempt: 2, EnqueuedAt: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
			}
			err := drainer.NewGRPCWorker(conn).Handle(t.Context(), sent)
			job := <-got
			if job.ID != sent.ID || job.Tenant != sent.Tenant || job.Lane != sent.Lane || string(job.Payload) != "payload" ||
				job.Attributes["kind"] != "email" || job.Attempt != 2 || !job.EnqueuedAt.Equal(sent.EnqueuedAt) {
				t.Errorf("handler got %+v, sent %+v", job, sent)
			}
			var ra *drainer.RetryAfterError
			switch {
			case tt.wantOK:
				if err != nil {
					t.Fatalf("drainer outcome %v, want ack", err)
				}
			case tt.wantRetry:
				if !isRetry(err) {
					t.Fatalf("drainer outcome %v, want retry", err)
				}
				if hinted := errors.As(err, &ra); hinted != (tt.wantAfter > 0) || (hinted && ra.After != tt.wantAfter) {
					t.Fatalf("drainer outcome %v, want a least delay of %s", err, tt.wantAfter)
				}
			default:
				if !drainer.IsPermanent(err) {
					t.Fatalf("drainer outcome %v, want dead-letter", err)
				}
			}
		})
	}
}

// TestGracefulStop: once Serve's context ends, a job in progress finishes
// and is acked, new calls are refused, and Serve returns.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(ctx, lis, worker.Config{Logger: quiet, Handler: func(context.Context, worker.Job) error {
			close(started)
			<-release
			return nil
		}})
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health before stop: %v, %v", resp, err)
	}
	delivered := make(chan error, 1)
	go func() {
		delivered <- drainer.NewGRPCWorker(conn).Handle(t.Context(), &drainer.Job{ID: "j1", Attempt: 1})
	}()
	<-started
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a job in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-delivered; err != nil {
		t.Fatalf("the job in progress: %v, want ack", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := drainer.NewGRPCWorker(conn).Handle(t.Context(), &drainer.Job{ID: "j2", Attempt: 1}); err == nil || drainer.IsPermanent(err) {
		t.Fatalf("a call after the stop: %v, want a retryable failure", err)
	}
}

// TestShutdownGrace: a job that outlasts the grace has its context
// cancelled, and the drainer sees a retryable failure.
func TestShutdownGrace(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	handlerErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(ctx, lis, worker.Config{Logger: quiet, ShutdownGrace: 100 * time.Millisecond, Handler: func(ctx context.Context, _ worker.Job) error {
			close(started)
			<-ctx.Done()
			handlerErr <- ctx.Err()
			return ctx.Err()
		}})
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	delivered := make(chan error, 1)
	go func() {
		delivered <- drainer.NewGRPCWorker(conn).Handle(t.Context(), &drainer.Job{ID: "j1", Attempt: 1})
	}()
	<-started
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := <-handlerErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("handler context ended with %v, want Canceled", err)
	}
	if err := <-delivered; err == nil || drainer.IsPermanent(err) {
		t.Fatalf("drainer outcome %v, want retry", err)
	}
}

// TestShutdownGraceStuckHandler: a handler that ignores its cancelled
// context does not keep Serve from returning after the grace. Serve
// waited for it for ever (GracefulStop waits for every handler, even
// after Stop), so a SIGTERMed worker hung until it was killed.
func TestShutdownGraceStuckHandler(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(ctx, lis, worker.Config{Logger: quiet, ShutdownGrace: 50 * time.Millisecond, Handler: func(context.Context, worker.Job) error {
			close(started)
			<-release // heedless of its context
			return nil
		}})
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	delivered := make(chan error, 1)
	go func() {
		delivered <- drainer.NewGRPCWorker(conn).Handle(t.Context(), &drainer.Job{ID: "j1", Attempt: 1})
	}()
	<-started
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		release <- struct{}{} // let Serve return
		<-served
		t.Fatal("Serve still stopping 10s after ctx ended, with a ShutdownGrace of 50ms")
	}
	if err := <-delivered; err == nil || drainer.IsPermanent(err) {
		t.Fatalf("drainer outcome %v, want retry", err)
	}
}

func TestServeNeedsHandler(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Serve(t.Context(), lis, worker.Config{}); err == nil {
		t.Fatal("Serve without a handler succeeded")
	}
}

// TestMutualTLS serves the worker over mutual TLS and delivers to it as
// the drainer does with --worker-tls-ca, --worker-tls-cert and
// --worker-tls-key.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	files := tlstest.New(t)
	serverTLS, err := worker.LoadTLS(files.ServerCert, files.ServerKey, files.CA)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(ctx, lis, worker.Config{Logger: quiet, TLS: serverTLS, Handler: func(context.Context, worker.Job) error { return nil }})
	}()
	defer func() { cancel(); <-served }()

	deliver := func(c tlsflags.Client) error {
		dial, err := c.DialOption("worker-")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(lis.Addr().String(), dial)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return drainer.NewGRPCWorker(conn).Handle(t.Context(), &drainer.Job{ID: "j1", Attempt: 1})
	}
	if err := deliver(tlsflags.Client{CAFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	if err := deliver(tlsflags.Client{CAFile: files.CA}); err == nil {
		t.Fatal("delivered without a client certificate")
	}
	if _, err := worker.LoadTLS(files.ServerCert, files.ServerKey, files.ServerKey); err == nil {
		t.Fatal("LoadTLS accepted a key file as the client CA")
	}
}

// TestTraceContext: W3C trace headers in the delivery's metadata reach the
// handler's Job.
func TestTraceContext(t *testing.T) {
	t.Parallel()
	got := make(chan worker.Job, 2)
	conn := serveWorker(t, worker.Config{Handler: func(_ context.Context, job worker.Job) error {
		got <- job
		return nil
	}})
	w := workerv1.NewWorkerServiceClient(conn)
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", parent, "tracestate", "vendor=1")
	if _, err := w.Process(ctx, &workerv1.ProcessRequest{JobId: "j1", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if job := <-got; job.TraceContext["traceparent"] != parent || job.TraceContext["tracestate"] != "vendor=1" {
		t.Fatalf("trace context %v", job.TraceContext)
	}
	if _, err := w.Process(t.Context(), &workerv1.ProcessRequest{JobId: "j2", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if job := <-got; job.TraceContext != nil {
		t.Fatalf("trace context %v without headers, want nil", job.TraceContext)
	}
}

// failingListener accepts until fail is closed, then fails every Accept
// (as a listener whose socket died).
type failingListener struct {
	net.Listener
	fail chan struct{}
}

func (l *failingListener) Accept() (net.Conn, error) {
	type accepted struct {
		c   net.Conn
		err error
	}
	got := make(chan accepted, 1)
	go func() {
		c, err := l.Listener.Accept()
		got <- accepted{c, err}
	}()
	select {
	case a := <-got:
		return a.c, a.err
	case <-l.fail:
		return nil, errors.New("listener died")
	}
}

// TestServeErrorStopsTheServer: when the listener fails, Serve returns
// its error and stops serving the connections it had: their handlers'
// contexts end. Before, the gRPC server ran on after Serve returned.
func TestServeErrorStopsTheServer(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	lis := &failingListener{Listener: inner, fail: make(chan struct{})}
	started, ended := make(chan struct{}), make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- worker.Serve(t.Context(), lis, worker.Config{Logger: quiet, Handler: func(ctx context.Context, _ worker.Job) error {
			close(started)
			<-ctx.Done()
			close(ended)
			return ctx.Err()
		}})
	}()
	conn, err := grpc.NewClient(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() { _ = drainer.NewGRPCWorker(conn).Handle(t.Context(), &drainer.Job{ID: "j1", Attempt: 1}) }()
	<-started
	close(lis.fail)
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "listener died") {
			t.Fatalf("Serve = %v, want the listener's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10s of its listener failing")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still runs 10s after Serve returned: the server was not stopped")
	}
}
