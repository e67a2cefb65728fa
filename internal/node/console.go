package node

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/console"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/ratelog"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/tenant"
)

// ConsoleFlags are the web console's settings.
type ConsoleFlags struct {
	Enabled         bool
	Listen          string
	ReadOnlyKeyFile string
	SampleInterval  time.Duration
	SecureCookies   bool
	// TLS serves the console's own listener (Listen) over HTTPS.
	TLS tlsflags.Server
}

// Register adds --console, --console-listen, --console-readonly-key-file,
// --console-sample-interval, --console-secure-cookies and
// --console-tls-cert, --console-tls-key and --console-tls-client-ca to fs.
func (f *ConsoleFlags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&f.Enabled, "console", true, "serve the web console (on --admin-listen, or --console-listen)")
	fs.StringVar(&f.Listen, "console-listen", "", "address of the web console's own listener; empty serves it on --admin-listen (plaintext only; --console-tls-* need --console-listen)")
	fs.StringVar(&f.ReadOnlyKeyFile, "console-readonly-key-file", "", "file holding a key that signs in to the web console read-only (look and dry-run; no replay or cancel)")
	flagconf.DurationVar(fs, &f.SampleInterval, "console-sample-interval", console.SampleIntervalDefault, "how often the web console samples queue stats for its charts of the last hour")
	fs.BoolVar(&f.SecureCookies, "console-secure-cookies", false, "mark the web console's cookies Secure, so a browser sends them over HTTPS only: set it when a TLS proxy serves the console (--console-tls-cert implies it)")
	f.TLS.Register(fs, "console-", "the web console")
}

// Validate checks the console flags; a sample interval that is not
// positive crashed the process once it served (found in review). TLS
// needs the console's own listener: the admin listener it would share
// otherwise speaks gRPC, and its TLS is the admin API's.
func (f ConsoleFlags) Validate() error {
	if !f.Enabled {
		return nil
	}
	if f.SampleInterval <= 0 {
		return fmt.Errorf("--console-sample-interval %s: must be positive, such as 10s", f.SampleInterval)
	}
	if f.TLS.Enabled() && f.Listen == "" {
		return errors.New("--console-tls-cert, --console-tls-key and --console-tls-client-ca serve the web console's own listener, and there is none: " +
			"add --console-listen (such as 127.0.0.1:7073); the console cannot serve HTTPS on --admin-listen")
	}
	return nil
}

// ReadOnlyKey reads the console's read-only key from
// --console-readonly-key-file: "" when none is given, or the console is
// off.
func (f ConsoleFlags) ReadOnlyKey() (string, error) {
	if !f.Enabled || f.ReadOnlyKeyFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(f.ReadOnlyKeyFile)
	if err != nil {
		return "", fmt.Errorf("--console-readonly-key-file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("--console-readonly-key-file %s is empty", f.ReadOnlyKeyFile)
	}
	// Any length was taken, a key of one letter too, where the other keys
	// need tenant.MinKeyLen (found in a review).
	if n := len(key); n < tenant.MinKeyLen {
		return "", fmt.Errorf("--console-readonly-key-file %s holds a key of %d characters: give one of at least %d (e.g. openssl rand -hex 20)", f.ReadOnlyKeyFile, n, tenant.MinKeyLen)
	}
	return key, nil
}

// ConsoleHook serves the web console beside the admin API: given the
// admin listener and the gRPC server that answers the console's own calls
// (the admin API without the listener's TLS), it returns the listener the
// admin API is to use (the console may share it) and a function that
// stops the console.
type ConsoleHook func(ctx context.Context, lis net.Listener, srv *grpc.Server) (net.Listener, func(), error)

// ConsoleHook returns the DrainConfig.Console hook the flags describe
// (nil when the console is off, or cannot share a TLS admin listener and
// has no listener of its own: that is logged). announce is called once with the
// console's URL when it listens. The console's certificate is loaded
// here, so a missing or mismatched one fails the start.
func (f ConsoleFlags) ConsoleHook(adminKey string, adminTLS bool, log *slog.Logger, announce func(url string)) (ConsoleHook, error) {
	if !f.Enabled {
		return nil, nil
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	roKey, err := f.ReadOnlyKey()
	if err != nil {
		return nil, err
	}
	if adminTLS && f.Listen == "" {
		log.Warn("web console off: the admin listener serves TLS, which the console cannot share; give it --console-listen with --console-tls-cert and --console-tls-key, or say --console=false")
		return nil, nil
	}
	tlsCfg, err := f.TLS.Config("console-", log)
	if err != nil {
		return nil, err
	}
	if adminTLS && tlsCfg == nil && !f.SecureCookies {
		// --console-secure-cookies says a TLS proxy serves the console.
		log.Warn("web console serves plain HTTP while the admin API uses TLS: its sign-in form sends the admin key in the clear; give it --console-tls-cert and --console-tls-key (or keep it on loopback, or behind a TLS proxy with --console-secure-cookies)",
			slog.String("console_listen", f.Listen))
	}
	scheme, tlsMode := "http", mode(f.TLS)
	if tlsCfg != nil {
		scheme = "https"
	}
	return func(ctx context.Context, lis net.Listener, srv *grpc.Server) (net.Listener, func(), error) {
		// The console calls the admin API through its gRPC server, in
		// process, so every call passes the same authorization.
		pipe := console.NewPipeListener()
		go func() { _ = srv.Serve(pipe) }()
		conn, err := grpc.NewClient("passthrough:///admin-api", grpc.WithContextDialer(pipe.Dial), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, fmt.Errorf("console: %w", err)
		}
		c, err := console.New(console.Config{
			Admin: adminv1.NewAdminServiceClient(conn), AdminKey: adminKey, ReadOnlyKey: roKey,
			SampleInterval: f.SampleInterval, SecureCookies: f.SecureCookies || tlsCfg != nil, Logger: log,
		})
		if err != nil {
			return nil, nil, errors.Join(err, conn.Close())
		}
		grpcLis, httpLis := lis, net.Listener(nil)
		if f.Listen != "" {
			if httpLis, err = net.Listen("tcp", f.Listen); err != nil {
				return nil, nil, errors.Join(fmt.Errorf("--console-listen %s: %w", f.Listen, err), conn.Close())
			}
			if tlsCfg != nil {
				httpLis = tls.NewListener(httpLis, tlsCfg)
			}
		} else {
			grpcLis, httpLis = console.Split(lis)
		}
		c.Start(ctx)
		hs := &http.Server{Handler: c, ErrorLog: httpErrorLog(log, &ratelog.Line{}, f.TLS.ClientCAFile != "")}
		SetHTTPTimeouts(hs)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := hs.Serve(httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				log.WarnContext(ctx, "web console stopped", slog.Any("error", err))
			}
		}()
		url := scheme + "://" + httpLis.Addr().String() + "/"
		log.InfoContext(ctx, "web console listening", slog.String("url", url), slog.String("addr", httpLis.Addr().String()),
			slog.String("tls", tlsMode), slog.Bool("read_only_key", roKey != ""))
		if announce != nil {
			announce(url)
		}
		stop := func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
			<-done
			c.Stop()
			_ = conn.Close()
			_ = pipe.Close()
		}
		return grpcLis, stop, nil
	}, nil
}

// SetHTTPTimeouts bounds the time a client of one of the processes' HTTP
// listeners (the console, metrics) may take to send a request, and to sit
// idle between requests. Connections kept alive after a request stayed
// open for ever, and with them their descriptors (found in a review). No
// write timeout: a CPU profile or trace answers after the seconds asked.
func SetHTTPTimeouts(s *http.Server) {
	s.ReadHeaderTimeout = 10 * time.Second
	s.ReadTimeout = 30 * time.Second
	s.IdleTimeout = 2 * time.Minute
}

// handshakeErrorPrefix begins the line net/http logs for each refused
// TLS handshake.
const handshakeErrorPrefix = "http: TLS handshake error from "

// httpErrorLog is the console server's ErrorLog: its lines at WARN, but
// refused TLS handshakes (a browser that distrusts the certificate, a
// plaintext client, one without a client certificate) at most one line
// each every, the next one counting those left out. net/http logs each
// one, so a scanner or a misconfigured health check filled the log.
// Connections that close before a word (port probes) are not logged.
func httpErrorLog(log *slog.Logger, every *ratelog.Line, mtls bool) *stdlog.Logger {
	return stdlog.New(&httpErrorWriter{log: log, every: every, mtls: mtls, other: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}, "", 0)
}

type httpErrorWriter struct {
	log   *slog.Logger
	every *ratelog.Line
	mtls  bool
	other *stdlog.Logger
}

// Write takes one line: the log.Logger writes each in one call.
func (w *httpErrorWriter) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	rest, ok := strings.CutPrefix(line, handshakeErrorPrefix)
	if !ok {
		return len(p), w.other.Output(2, line)
	}
	// The client's address, then ": " and the reason; addresses hold
	// colons but no ": ".
	client, reason, _ := strings.Cut(rest, ": ")
	if reason == "EOF" || strings.HasSuffix(reason, "connection reset by peer") {
		return len(p), nil
	}
	w.every.Do(func(skipped int64) {
		w.log.LogAttrs(context.Background(), slog.LevelWarn, "web console: TLS handshake refused",
			slog.String("client", client), slog.String("error", reason), slog.String("hint", consoleHandshakeHint(reason, w.mtls)),
			ratelog.Suppressed(skipped))
	})
	return len(p), nil
}

// consoleHandshakeHint says what a refused handshake on the console most
// likely needs.
func consoleHandshakeHint(reason string, mtls bool) string {
	switch {
	case strings.Contains(reason, "HTTP request to an HTTPS server"), strings.Contains(reason, "does not look like a TLS handshake"):
		return "the client speaks plaintext: open the console's https:// URL"
	case strings.Contains(reason, "didn't provide a certificate"):
		return "the browser sent no certificate signed by --console-tls-client-ca: install one it signed in the browser"
	case mtls && (strings.Contains(reason, "failed to verify certificate") || strings.Contains(reason, "unknown authority")):
		return "the client's certificate is not signed by --console-tls-client-ca, or has expired"
	case strings.Contains(reason, "remote error"):
		return "the browser refused the console's certificate: trust the CA that signed --console-tls-cert, and open a name the certificate carries"
	}
	return "compare the client's TLS settings with --console-tls-cert and --console-tls-client-ca"
}
