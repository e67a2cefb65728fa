package serve

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestBearerToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values []string
		want   string // empty: refused
	}{
		{"bearer", []string{"Bearer k-123"}, "k-123"},
		{"scheme case", []string{"bEaReR k-123"}, "k-123"},
		{"padded", []string{"Bearer   k-123  "}, "k-123"},
		{"none", nil, ""},
		{"empty token", []string{"Bearer "}, ""},
		{"basic scheme", []string{"Basic k-123"}, ""},
		{"no scheme", []string{"k-123"}, ""},
		{"two values", []string{"Bearer a-key-1", "Bearer b-key-2"}, ""},
		{"two values, one bad", []string{"junk", "Bearer b-key-2"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			md := metadata.MD{}
			for _, v := range tt.values {
				md.Append("authorization", v)
			}
			got, ok := BearerToken(metadata.NewIncomingContext(t.Context(), md))
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("BearerToken = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}

// sizeDesc is a service that answers how many bytes of payload it received, so tests can
// send a request of any size.
var sizeDesc = grpc.ServiceDesc{
	ServiceName: "sluice.test.Size",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Measure",
		Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.BytesValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return wrapperspb.Int64(int64(len(in.GetValue()))), nil }
			if interceptor == nil {
				return h(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/sluice.test.Size/Measure"}, h)
		},
	}},
}

func startServer(t *testing.T, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	return startServerLog(t, slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
}

// startServerLog is startServer logging to log.
func startServerLog(t *testing.T, log *slog.Logger, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	srv := NewServer(log, nil, nil, opts...)
	srv.GRPC.RegisterService(&sizeDesc, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, 0) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func measure(ctx context.Context, conn *grpc.ClientConn, n int) (int64, error) {
	out := new(wrapperspb.Int64Value)
	err := conn.Invoke(ctx, "/sluice.test.Size/Measure", wrapperspb.Bytes(make([]byte, n)), out)
	return out.GetValue(), err
}

// TestTransportLimits sends requests and metadata just under and over the
// server's limits: the ones over fail before any handler runs, with the
// codes the README documents.
func TestTransportLimits(t *testing.T) {
	t.Parallel()
	conn := startServer(t)
	tests := []struct {
		name     string
		body     int
		metadata int
		want     codes.Code
	}{
		{"small", 10, 0, codes.OK},
		{"body at the limit", MaxRecvMsgBytes - 8, 0, codes.OK}, // BytesValue adds a tag and a 4-byte length
		{"body over the limit", MaxRecvMsgBytes + 1, 0, codes.ResourceExhausted},
		{"metadata well within", 10, 4 << 10, codes.OK},
		{"metadata over the limit", 10, MaxHeaderListBytes + 1, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.metadata > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, "x-filler", strings.Repeat("f", tt.metadata))
			}
			got, err := measure(ctx, conn, tt.body)
			if code := status.Code(err); code != tt.want {
				t.Fatalf("code %v (%v), want %v", code, err, tt.want)
			}
			if err == nil && got != int64(tt.body) {
				t.Fatalf("handler saw %d bytes, want %d", got, tt.body)
			}
		})
	}
	// The connection survives refusals.
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
}

// TestCallerOptionsOverrideDefaults lowers the receive limit, as the admin
// listener does.
func TestCallerOptionsOverrideDefaults(t *testing.T) {
	t.Parallel()
	conn := startServer(t, grpc.MaxRecvMsgSize(1<<10))
	if _, err := measure(t.Context(), conn, 2<<10); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("2 KiB to a 1 KiB server: %v", err)
	}
}

func TestCallLevel(t *testing.T) {
	t.Parallel()
	for code, want := range map[codes.Code]string{
		codes.OK: "DEBUG", codes.Unauthenticated: "DEBUG", codes.FailedPrecondition: "DEBUG",
		codes.Unavailable: "WARN", codes.Unimplemented: "WARN",
		codes.Internal: "ERROR", codes.Unknown: "ERROR", codes.DataLoss: "ERROR",
	} {
		if got := slog.Level(callLevel(code)).String(); got != want {
			t.Errorf("callLevel(%v) = %s, want %s", code, got, want)
		}
	}
}

// TestCallLog: a finished call is logged at its level with the method and
// code, and not at all when that level is off.
func TestCallLog(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		level slog.Level
		n     int // request size: over 1 KiB fails RESOURCE_EXHAUSTED (debug)
		want  string
	}{
		{"ok at info: nothing", slog.LevelInfo, 10, ""},
		{"ok at debug", slog.LevelDebug, 10, `level=DEBUG msg="finished call" protocol=grpc grpc.component=server grpc.service=sluice.test.Size grpc.method=Measure grpc.method_type=unary`},
		{"refusal at info: nothing", slog.LevelInfo, 2 << 10, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf strings.Builder
			var mu sync.Mutex
			log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: tt.level}))
			conn := startServerLog(t, log, grpc.MaxRecvMsgSize(1<<10))
			// The call is logged before its answer is sent.
			_, _ = measure(t.Context(), conn, tt.n)
			mu.Lock()
			got := buf.String()
			mu.Unlock()
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) || tt.want != "" && !strings.Contains(got, "grpc.code=OK") {
				t.Fatalf("log:\n%s\nwant a line containing %q", got, tt.want)
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestListenRefusesAnEmptyAddress: an empty address binds every interface
// on a random port in net.Listen; an empty --admin-listen exposed the
// admin API so (found in review). It is refused, naming the flag.
func TestListenRefusesAnEmptyAddress(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"", " "} {
		lis, err := Listen(addr, "admin-listen")
		if err == nil {
			lis.Close()
			t.Fatalf("Listen(%q) listened on %s, want an error", addr, lis.Addr())
		}
		if !strings.Contains(err.Error(), "--admin-listen is empty") {
			t.Errorf("Listen(%q): %v, want one naming --admin-listen", addr, err)
		}
	}
}

// TestIdleConnectionsAreClosed: a connection that opened HTTP/2 and made
// no call is closed once idle for maxConnectionIdle; such connections
// were held for ever (found in a security review). Not parallel: it
// shortens the package's idle time while no other test builds a server.
func TestIdleConnectionsAreClosed(t *testing.T) {
	defer func(d time.Duration) { maxConnectionIdle = d }(maxConnectionIdle)
	maxConnectionIdle = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts []grpc.ServerOption
	}{
		{"default", nil},
		// The pull-worker listener pings its clients; it set its
		// parameters with grpc.KeepaliveParams, which dropped the limit.
		{"own keepalive parameters", []grpc.ServerOption{Keepalive(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkIdleConnectionClosed(t, NewServer(slog.New(slog.DiscardHandler), nil, nil, tc.opts...))
		})
	}
}

func checkIdleConnectionClosed(t *testing.T, srv *Server) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, 0) }()
	defer func() { cancel(); <-done }()

	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The client preface and an empty SETTINGS frame: a connection, no call.
	if _, err := conn.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(10 * time.Second))
	_, err = io.Copy(io.Discard, conn) // the server's frames, then EOF
	// gRPC says GOAWAY when the connection has been idle that long, and
	// closes it when the client acknowledges, or after 5 s: this one
	// acknowledges nothing. With an idle time of an hour, the read runs
	// into its 10 s deadline.
	if took := time.Since(start); err != nil || took > 8*time.Second {
		t.Fatalf("idle connection: read ended after %s with %v, want the server to close it after %s and gRPC's 5 s", took, err, maxConnectionIdle)
	}
}

// TestFailedCallLogIsBounded: the "finished call" lines of failed calls
// (warn and above) are logged once per ratelog.Every for each method and
// code; debug lines, asked for, all are. With the disk full every
// refused Submit logged a warning, and retrying clients flooded the log,
// often on that same disk (found by a tester).
func TestFailedCallLogIsBounded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		level slog.Level
		calls []codes.Code
		want  map[string]int // lines per code
	}{
		{"UNAVAILABLE", slog.LevelInfo, slices.Repeat([]codes.Code{codes.Unavailable}, 50), map[string]int{"Unavailable": 1}},
		{
			"two codes", slog.LevelInfo, slices.Repeat([]codes.Code{codes.Unavailable, codes.Internal, codes.DeadlineExceeded}, 20),
			map[string]int{"Unavailable": 1, "Internal": 1, "DeadlineExceeded": 1},
		},
		{"OK at debug", slog.LevelDebug, slices.Repeat([]codes.Code{codes.OK}, 20), map[string]int{"OK": 20}},
		{"refusals at debug", slog.LevelDebug, slices.Repeat([]codes.Code{codes.ResourceExhausted}, 20), map[string]int{"ResourceExhausted": 20}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf strings.Builder
			var mu sync.Mutex
			log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: tt.level}))
			// The request's length is the code the call fails with.
			fail := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if c := codes.Code(len(req.(*wrapperspb.BytesValue).GetValue())); c != codes.OK {
					return nil, status.Error(c, "refused")
				}
				return h(ctx, req)
			}
			srv := NewServer(log, []grpc.UnaryServerInterceptor{fail}, nil)
			srv.GRPC.RegisterService(&sizeDesc, struct{}{})
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.GRPC.Serve(lis) }()
			defer srv.GRPC.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			for _, c := range tt.calls {
				if _, err := measure(t.Context(), conn, int(c)); status.Code(err) != c {
					t.Fatalf("call: %v, want %v", err, c)
				}
			}
			mu.Lock()
			got := map[string]int{}
			for l := range strings.Lines(buf.String()) {
				_, code, _ := strings.Cut(l, "grpc.code=")
				code, _, _ = strings.Cut(code, " ")
				got[code]++
			}
			mu.Unlock()
			if !maps.Equal(got, tt.want) {
				t.Errorf("lines per code %v, want %v:\n%s", got, tt.want, buf.String())
			}
		})
	}
}

// TestLoggerWritesDurationsReadably: "took":"5ms", not "took":5000000.
func TestLoggerWritesDurationsReadably(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	log, err := NewLogger(&out, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("opened", slog.Duration("took", 5*time.Millisecond), slog.Group("g", slog.Duration("wait", 1500*time.Millisecond)))
	if got := out.String(); !strings.Contains(got, `"took":"5ms"`) || !strings.Contains(got, `"wait":"1.5s"`) {
		t.Fatalf("log line %s, want durations as strings", got)
	}
}
