package tlsflags

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"

	"google.golang.org/grpc/credentials"

	"github.com/sluice-dev/sluice/internal/ratelog"
)

// handshakeLog is a server's TLS credentials that log each refused
// handshake (at most one line each ratelog.Every per listener, the next
// counting those in between; the listeners of one TLS setting share
// one): grpc-go closes
// the connection and says nothing in sluice's log, so a client with the
// wrong CA, no certificate or no TLS at all saw its calls fail while the
// server's log stayed silent (found in a walkthrough). Connections closed
// before they said anything (port probes, health checks) are not
// refusals.
type handshakeLog struct {
	credentials.TransportCredentials
	log   *slog.Logger
	mtls  bool
	every *ratelog.Lines[string] // per listener address; shared by the clones
}

func newHandshakeLog(creds credentials.TransportCredentials, log *slog.Logger, mtls bool) *handshakeLog {
	return &handshakeLog{TransportCredentials: creds, log: log, mtls: mtls, every: &ratelog.Lines[string]{}}
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
	h.every.Do(conn.LocalAddr().String(), func(skipped int64) {
		attrs := []slog.Attr{
			slog.String("listener", conn.LocalAddr().String()), slog.String("client", conn.RemoteAddr().String()),
			slog.String("error", err.Error()), slog.String("hint", handshakeHint(err.Error(), h.mtls)),
		}
		if skipped > 0 {
			attrs = append(attrs, slog.Int64("more_refused_since_last_line", skipped))
		}
		h.log.LogAttrs(context.Background(), slog.LevelWarn, "TLS handshake refused: the client's calls fail", attrs...)
	})
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
		// A Go client (sluicectl, client, worker) sends its certificate
		// only when its issuer is among the CAs this listener names, so a
		// certificate from another CA arrives as none: the hint said the
		// client gave none when it had (found by a tester).
		return "the client sent no certificate, or one not signed by --tls-client-ca (Go clients withhold a certificate " +
			"the listener's CA list does not cover): give the client one that CA signed (--tls-cert and --tls-key)"
	case mtls && (strings.Contains(msg, "failed to verify certificate") || strings.Contains(msg, "unknown authority")):
		return "the client's certificate is not signed by --tls-client-ca, or has expired"
	case strings.Contains(msg, "remote error"):
		return "the client refused this server's certificate: give it the CA that signed --tls-cert, and dial a name the certificate carries (or set --tls-server-name)"
	}
	return "compare the client's TLS settings with this listener's (--tls-cert, --tls-client-ca)"
}
