// Package worker runs a plain handler function on sluice's jobs.
//
// Connect, the default way and the one to use, pulls: the worker dials
// sluice's --worker-listen address (127.0.0.1:7072 by default) with a
// worker key, and sluice sends it jobs as the worker has room for them
// (ConnectOptions.Concurrency). To have a drainer push jobs instead
// (cmd/gateway or cmd/drainer with --worker-addr), ListenAndServe or Serve
// serves sluice's worker gRPC service (sluice.worker.v1.WorkerService)
// from the same handler.
//
// Connect reconnects when the stream breaks, and stops with ErrRefused
// when retrying cannot help until the worker's own settings change: a
// refused key or Hello, an address without the worker API, or a TLS
// failure that lies with the worker (its client certificate expired or
// missing, sluice's certificate from a CA it does not trust, TLS and
// plaintext crossed). A TLS failure sluice's side can heal while the
// worker waits (sluice's certificate expired, the worker's from a CA
// sluice does not take yet) is retried, each warning with a hint.
//
// What the handler returns decides the job's fate, pulled or pushed (in
// parentheses, the status a push worker answers):
//
//	nil                       ack: the job is done and deleted
//	RetryAfter(err, d)        retry, no sooner than d (at most 15 min; UNAVAILABLE with RetryInfo)
//	Permanent(err)            dead-letter at once (FAILED_PRECONDITION)
//	any other error, a panic  retry with the drainer's backoff (UNAVAILABLE, INTERNAL)
//
// ToStatus and FromStatus hold the push protocol's status table
// (status.go); the drainer's gRPC delivery uses FromStatus. Job, Permanent
// and RetryAfter are shared with in-process handlers: the drainer package
// re-exports them.
//
// A job is retried until the drainer's --max-attempts, then dead-lettered.
// Delivery is at least once: the handler must be idempotent on Job.ID.
package worker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
)

// Job is one delivery of a job.
type Job struct {
	// ID is the gateway's job id; a redelivery carries the same id.
	ID string
	// Tenant submitted the job; Lane is its tier's lane.
	Tenant string
	Lane   string
	// Payload and Attributes are as submitted.
	Payload    []byte
	Attributes map[string]string
	// Attempt is 1 on the first delivery.
	Attempt int
	// EnqueuedAt is when the gateway accepted the job.
	EnqueuedAt time.Time
	// TraceContext holds the W3C "traceparent" and "tracestate" of the
	// delivery, if any: the job's trace. In a worker it is what the
	// delivery carried in its gRPC metadata, for a handler that does not
	// run an OpenTelemetry stats handler (see Config.ServerOptions) to pick
	// it up from the context; in an in-process drainer handler it is the
	// sluice.deliver span's (or the submitter's, with tracing off), and the
	// handler's ctx carries the same span context.
	TraceContext map[string]string
}

// Handler processes one job. Its ctx ends when the drainer gives up on the
// delivery or the server stops.
type Handler func(ctx context.Context, job Job) error

// RetryAfterError asks for the next delivery no sooner than After. Its
// message is Err's (if Err is nil, it says so): the delay travels to the
// drainer as a RetryInfo (from a worker) and the drainer logs it beside
// the error.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return "retry after " + e.After.String() + " (no cause given)"
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter wraps err to ask for a retry no sooner than d. The drainer
// caps the delay at 15 minutes (queue.MaxDelay, SQS's longest): a longer d,
// such as time.Hour, waits 15 minutes. It waits its own backoff for the
// attempt (--retry-base, --retry-cap) when that is longer than d, and so
// for a d of zero or less: a negative d asks for nothing.
func RetryAfter(err error, d time.Duration) error { return &RetryAfterError{Err: err, After: d} }

// PermanentError marks a failure that retrying cannot fix. Its message is
// Err's (if Err is nil, it says so): the drainer records the job's reason
// as "permanent_failure: …".
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "failed for good (no cause given)"
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the job goes to the dead-letter queue
// without further attempts.
func Permanent(err error) error { return &PermanentError{Err: err} }

// IsPermanent reports whether err asks for dead-lettering.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// ErrReleased is a delivery that did not reach a worker's handler, or whose
// worker went away before answering (its pull stream ended): the job goes
// back to its queue at once, with no attempt counted.
var ErrReleased = errors.New("released: the worker went away before answering")

// Service implements workerv1.WorkerServiceServer by calling a Handler.
type Service struct {
	workerv1.UnimplementedWorkerServiceServer
	handler Handler
	log     *slog.Logger
}

// NewService returns the worker service calling h; register it on your own
// gRPC server with workerv1.RegisterWorkerServiceServer, or use Serve.
// Panics in h are recovered, logged on log (nil: slog.Default()) and
// answered INTERNAL, which the drainer retries.
func NewService(h Handler, log *slog.Logger) *Service {
	return &Service{handler: h, log: cmp.Or(log, slog.Default())}
}

// Process runs the handler on one delivery and maps its error to the
// status the drainer understands.
func (s *Service) Process(ctx context.Context, req *workerv1.ProcessRequest) (resp *workerv1.ProcessResponse, err error) {
	job := Job{
		ID:         req.GetJobId(),
		Tenant:     req.GetTenant(),
		Lane:       req.GetLane(),
		Payload:    req.GetPayload(),
		Attributes: req.GetAttributes(),
		Attempt:    int(req.GetAttempt()),
	}
	if t := req.GetEnqueuedAt(); t != nil {
		job.EnqueuedAt = t.AsTime()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := md.Get(k); len(v) > 0 {
			if job.TraceContext == nil {
				job.TraceContext = map[string]string{}
			}
			job.TraceContext[k] = v[0]
		}
	}
	defer func() {
		if p := recover(); p != nil {
			s.log.ErrorContext(ctx, "panic in job handler", slog.String("job_id", job.ID), slog.String("tenant", job.Tenant),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			resp, err = nil, status.Errorf(codes.Internal, "handler panicked: %v", p)
		}
	}()
	if err := s.handler(ctx, job); err != nil {
		return nil, ToStatus(err)
	}
	return &workerv1.ProcessResponse{}, nil
}

// ShutdownGraceDefault is Config.ShutdownGrace's default.
const ShutdownGraceDefault = 30 * time.Second

// Config configures Serve.
type Config struct {
	// Handler processes each job. Required.
	Handler Handler
	// ShutdownGrace is how long Serve waits for jobs in progress once its
	// context ends; then their contexts are cancelled and the drainer
	// retries them, and Serve returns once their handlers do, or 5s later
	// without those that ignore their context. Defaults to 30s.
	ShutdownGrace time.Duration
	// TLS serves the worker API over TLS with this config (LoadTLS builds
	// one; set ClientCAs and ClientAuth to require the drainers' client
	// certificates, as --worker-tls-cert gives them). Nil serves plain
	// text.
	TLS *tls.Config
	// ServerOptions are passed to grpc.NewServer after the TLS
	// credentials: interceptors, a stats handler for tracing.
	ServerOptions []grpc.ServerOption
	// Logger logs panics in the handler. Defaults to slog.Default().
	Logger *slog.Logger
}

// Serve serves the worker service, and the gRPC health service, on lis
// until ctx ends, then stops gracefully: health turns NOT_SERVING, new
// deliveries are refused (the drainer retries them) and jobs in progress
// get up to ShutdownGrace to finish. It returns nil after a stop caused by
// ctx.
func Serve(ctx context.Context, lis net.Listener, cfg Config) error {
	if cfg.Handler == nil {
		return errors.Join(errors.New("worker: Handler is required"), lis.Close())
	}
	grace := cmp.Or(cfg.ShutdownGrace, ShutdownGraceDefault)
	var opts []grpc.ServerOption
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	srv := grpc.NewServer(append(opts, cfg.ServerOptions...)...)
	workerv1.RegisterWorkerServiceServer(srv, NewService(cfg.Handler, cfg.Logger))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		// The listener failed: stop serving the connections already
		// accepted too, rather than leave them running after Serve returns.
		srv.Stop()
		return fmt.Errorf("worker: serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		srv.Stop() // closes the connections and cancels the handlers' contexts
		select {
		case <-stopped:
		case <-time.After(cancelGrace):
			// GracefulStop waits for every handler, even after Stop: one
			// that ignores its context kept Serve, and the process, from
			// ever returning (found in review). The drainer has retried
			// its job already.
			cmp.Or(cfg.Logger, slog.Default()).WarnContext(ctx, "worker: handlers still running after cancellation: returning without them",
				slog.Duration("waited", cancelGrace))
		}
	}
	<-errc // Serve returns nil once stopped
	return nil
}

// ListenAndServe listens on addr (host:port) and calls Serve.
func ListenAndServe(ctx context.Context, addr string, cfg Config) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("worker: listen: %w", err)
	}
	return Serve(ctx, lis, cfg)
}

// LoadTLS returns a server TLS config for Config.TLS from a PEM
// certificate and key. clientCAFile, when given, is a PEM bundle of the
// CAs whose client certificates are required (mutual TLS).
func LoadTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load worker certificate: %w", err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("read client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA file %s: no PEM certificate found", clientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
