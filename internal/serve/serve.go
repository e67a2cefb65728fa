// Package serve holds the process plumbing both binaries share: the JSON
// logger, a gRPC server with recovery, logging, health, reflection and the
// transport limits (message and metadata size), bearer credentials, and
// serving with a bounded graceful stop.
package serve

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/ratelog"
)

// NewLogger returns a JSON logger at level ("debug", "info", "warn",
// "error"). Durations are written as Go writes them ("1.5s"), not as
// JSON's integer nanoseconds, which read "took":5000000 in the start-up
// log.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: readableDuration})), nil
}

// readableDuration writes a duration attribute as a string.
func readableDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// Server is a gRPC server with its health service.
type Server struct {
	GRPC   *grpc.Server
	Health *health.Server
}

// Transport limits, enforced by gRPC before a call reaches a handler.
const (
	// MaxRecvMsgBytes bounds one request message. It is a little above the
	// largest request a handler accepts (the gateway's 16 MiB
	// SubmitBatch), so a request near that size is refused by the handler
	// with INVALID_ARGUMENT and field details, and a grossly oversize one
	// is refused by gRPC with RESOURCE_EXHAUSTED before it is decoded.
	MaxRecvMsgBytes = 17 << 20
	// MaxHeaderListBytes bounds a call's metadata (HTTP/2 header list):
	// the credential, trace context and gRPC's own headers need well under
	// 1 KiB. A client sending more gets INTERNAL from its gRPC library
	// ("header list size … violates the maximum size") and nothing reaches
	// a handler. 8 KiB is the limit gRPC is moving to by default.
	MaxHeaderListBytes = 8 << 10
)

// maxConnectionIdle is how long a connection with no call under way is
// kept: gRPC clients reconnect at their next call. Connections opened and
// left idle (the HTTP/2 preface alone, no key) were held for ever, and
// with them a descriptor each (found in a security review). A server
// that needs keepalive parameters of its own passes Keepalive, not
// grpc.KeepaliveParams, which replaces the whole set: the pull-worker
// listener's did, and its idle connections stayed (found in review).
var maxConnectionIdle = 5 * time.Minute

// Keepalive returns the option that sets p as a server's keepalive
// parameters, with the idle limit every server keeps unless p sets one.
func Keepalive(p keepalive.ServerParameters) grpc.ServerOption {
	p.MaxConnectionIdle = cmp.Or(p.MaxConnectionIdle, maxConnectionIdle)
	return grpc.KeepaliveParams(p)
}

// NewServer returns a gRPC server whose interceptors run in the order
// recover panics → log the call → the given ones (authentication), with
// the health and reflection services registered. It applies the transport
// limits above; opts come after them, so a caller may lower the receive
// size or add TLS credentials (see internal/tlsflags).
func NewServer(log *slog.Logger, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor, opts ...grpc.ServerOption) *Server {
	recoverOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in handler", slog.Any("panic", p))
		return status.Error(codes.Internal, "internal error")
	})
	cl := &callLog{log: log}
	u := append([]grpc.UnaryServerInterceptor{
		recovery.UnaryServerInterceptor(recoverOpt),
		cl.unary,
	}, unary...)
	s := append([]grpc.StreamServerInterceptor{
		recovery.StreamServerInterceptor(recoverOpt),
		cl.stream,
	}, stream...)
	all := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxRecvMsgBytes), grpc.MaxHeaderListSize(MaxHeaderListBytes),
		Keepalive(keepalive.ServerParameters{}),
	}
	all = append(all, opts...)
	all = append(all, grpc.ChainUnaryInterceptor(u...), grpc.ChainStreamInterceptor(s...))
	srv := &Server{GRPC: grpc.NewServer(all...), Health: health.NewServer()}
	healthpb.RegisterHealthServer(srv.GRPC, srv.Health)
	reflection.Register(srv.GRPC)
	return srv
}

// callLevel logs successful and expected refusals at debug, so the log at
// info shows only what an operator must look at.
func callLevel(code codes.Code) slog.Level {
	switch code {
	case codes.OK, codes.InvalidArgument, codes.ResourceExhausted, codes.Unauthenticated,
		codes.PermissionDenied, codes.NotFound, codes.AlreadyExists, codes.Canceled,
		// Refusals of calls the state does not allow now, answered as
		// designed: ListRedrives on the embedded backend (every view of
		// the console's Replays page logged an ERROR, found in a soak
		// test), a dead-letter list during a replay.
		codes.FailedPrecondition, codes.Aborted, codes.OutOfRange:
		return slog.LevelDebug
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unimplemented:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// callLog logs each finished call at its callLevel, with the fields
// go-grpc-middleware's logging interceptor uses. It builds the fields
// only when the level is enabled: at info, a successful call costs a
// clock reading and nothing else. Lines at warn and above are logged at
// most once per ratelog.Every for each method and code, the next
// counting those left out: with the backend down (a full or read-only
// disk) every refused Submit logged one, and a client retrying flooded
// the log, often on that same disk (found by a tester). Debug lines,
// asked for, are all logged.
type callLog struct {
	log   *slog.Logger
	lines ratelog.Lines[callKind]
}

// callKind is what the log lines of failed calls are limited by.
type callKind struct {
	method string
	code   codes.Code
}

func (c *callLog) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	c.finished(ctx, info.FullMethod, "unary", start, err)
	return resp, err
}

func (c *callLog) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	kind := "server_stream"
	switch {
	case info.IsClientStream && info.IsServerStream:
		kind = "bidi_stream"
	case info.IsClientStream:
		kind = "client_stream"
	}
	c.finished(ss.Context(), info.FullMethod, kind, start, err)
	return err
}

func (c *callLog) finished(ctx context.Context, method, kind string, start time.Time, err error) {
	code := status.Code(err)
	level := callLevel(code)
	if !c.log.Enabled(ctx, level) {
		return
	}
	if level < slog.LevelWarn {
		logCall(ctx, c.log, level, method, kind, start, err, 0)
		return
	}
	c.lines.Do(callKind{method, code}, func(skipped int64) {
		logCall(ctx, c.log, level, method, kind, start, err, skipped)
	})
}

func logCall(ctx context.Context, log *slog.Logger, level slog.Level, method, kind string, start time.Time, err error, skipped int64) {
	service, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	attrs := []slog.Attr{
		slog.String("protocol", "grpc"), slog.String("grpc.component", "server"),
		slog.String("grpc.service", service), slog.String("grpc.method", name), slog.String("grpc.method_type", kind),
		slog.String("grpc.start_time", start.Format(time.RFC3339)), slog.String("grpc.code", status.Code(err).String()),
		slog.String("grpc.time_ms", fmt.Sprintf("%.3f", float64(time.Since(start).Microseconds())/1000)),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", err.Error()))
	}
	if skipped > 0 {
		attrs = append(attrs, ratelog.Suppressed(skipped))
	}
	log.LogAttrs(ctx, level, "finished call", attrs...)
}

// Listen opens a TCP listener, with an error that says what to change.
// An empty address is refused: net.Listen would bind every interface on a
// random port, which for the admin API is an exposure nobody asked for
// (found in review).
func Listen(addr, flagName string) (net.Listener, error) {
	if strings.TrimSpace(addr) == "" {
		return nil, fmt.Errorf("--%s is empty: give a host and port, such as 127.0.0.1:7071 (0.0.0.0:7071 to listen on every interface)", flagName)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("listen on %s: the address is in use; stop the other process or pick another with --%s", addr, flagName)
		}
		return nil, fmt.Errorf("listen on %s (--%s): %w", addr, flagName, err)
	}
	return lis, nil
}

// Serve serves srv on lis until ctx ends, then marks it not serving and
// stops gracefully, cutting remaining calls after grace.
func (srv *Server) Serve(ctx context.Context, lis net.Listener, grace time.Duration) error {
	srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	errc := make(chan error, 1)
	go func() { errc <- srv.GRPC.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	srv.Health.Shutdown()
	t := time.AfterFunc(grace, srv.GRPC.Stop)
	defer t.Stop()
	srv.GRPC.GracefulStop()
	return nil
}

// BearerToken extracts the key from "authorization: Bearer <key>" call
// metadata. A call must carry exactly one authorization value: with two,
// which credential counts would depend on their order, so neither does.
// The key is a secret: callers must never log or echo it.
func BearerToken(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	return BearerTokenOf(md)
}

// BearerTokenOf is BearerToken for metadata already in hand (a tap handle
// sees the headers before there is a call context).
func BearerTokenOf(md metadata.MD) (string, bool) {
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}

// IsPublicMethod reports whether a gRPC method is served without a
// credential: health checks and reflection carry no tenant data.
func IsPublicMethod(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.") || strings.HasPrefix(method, "/grpc.reflection.")
}
