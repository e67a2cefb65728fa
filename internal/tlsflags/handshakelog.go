package tlsflags

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/credentials"
)

// handshakeLogEvery is how often at most a listener logs a refused
// handshake; those in between are counted in the next line.
const handshakeLogEvery = 10 * time.Second

// handshakeLog is a server's TLS credentials that log each refused
// handshake (at most one line each handshakeLogEvery): grpc-go closes
// the connection and says nothing in sluice's log, so a client with the
// wrong CA, no certificate or no TLS at all saw its calls fail while the
// server's log stayed silent (found in a walkthrough). Connections closed
// before they said anything (port probes, health checks) are not
// refusals.
type handshakeLog struct {
	credentials.TransportCredentials
	log     *slog.Logger
	mtls    bool
	every   *rate.Sometimes
	skipped *atomic.Int64
}

func newHandshakeLog(creds credentials.TransportCredentials, log *slog.Logger, mtls bool) *handshakeLog {
	return &handshakeLog{TransportCredentials: creds, log: log, mtls: mtls, every: &rate.Sometimes{Interval: handshakeLogEvery}, skipped: new(atomic.Int64)}
}

// ServerHandshake is the wrapped credentials' handshake, logging a
// refusal.
func (h *handshakeLog) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := h.TransportCredentials.ServerHandshake(conn)
	if err != nil && !silent(err) {
		h.report(conn, err)
	}
	return out, info, err
}

// Clone keeps the logging.
func (h *handshakeLog) Clone() credentials.TransportCredentials {
	c := *h
	c.TransportCredentials = h.TransportCredentials.Clone()
	return &c
}

func (h *handshakeLog) report(conn net.Conn, err error) {
	logged := false
	h.every.Do(func() {
		logged = true
		attrs := []slog.Attr{
			slog.String("listener", conn.LocalAddr().String()), slog.String("client", conn.RemoteAddr().String()),
			slog.String("error", err.Error()), slog.String("hint", handshakeHint(err.Error(), h.mtls)),
		}
		if n := h.skipped.Swap(0); n > 0 {
			attrs = append(attrs, slog.Int64("more_refused_since_last_line", n))
		}
		h.log.LogAttrs(context.Background(), slog.LevelWarn, "TLS handshake refused: the client's calls fail", attrs...)
	})
	if !logged {
		h.skipped.Add(1)
	}
}

// silent reports whether err is a connection that closed or reset before
// it began a handshake: what a port probe or a TCP health check does.
func silent(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// handshakeHint says what a refused handshake most likely needs.
func handshakeHint(msg string, mtls bool) string {
	switch {
	case strings.Contains(msg, "does not look like a TLS handshake"):
		return "the client speaks plaintext to a TLS listener: give it the CA that signed --tls-cert (sluicectl and workers: --tls-ca; client.Config: TLS)"
	case strings.Contains(msg, "didn't provide a certificate"):
		return "this listener requires a client certificate (--tls-client-ca): give the client one that CA signed (--tls-cert and --tls-key)"
	case mtls && (strings.Contains(msg, "failed to verify certificate") || strings.Contains(msg, "unknown authority")):
		return "the client's certificate is not signed by --tls-client-ca, or has expired"
	case strings.Contains(msg, "remote error"):
		return "the client refused this server's certificate: give it the CA that signed --tls-cert, and dial a name the certificate carries (or set --tls-server-name)"
	}
	return "compare the client's TLS settings with this listener's (--tls-cert, --tls-client-ca)"
}
