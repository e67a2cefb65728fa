package tlsflags

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/internal/ratelog"
	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// TestRefusedHandshakesAreLogged: a client the TLS listener refuses is
// named in the server's log with what it most likely lacks. The server
// said nothing while the client's calls failed (found in a walkthrough).
// A connection closed without a word (a port probe) is not logged.
func TestRefusedHandshakesAreLogged(t *testing.T) {
	t.Parallel()
	pki, other := tlstest.New(t), tlstest.New(t)
	tlsServer := Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}
	mtlsServer := Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA}
	tests := []struct {
		name     string
		server   Server
		client   Client
		wantHint string
	}{
		{"plaintext client", tlsServer, Client{}, "the client speaks plaintext to a TLS listener"},
		{"client trusting another CA", tlsServer, Client{CAFile: other.CA}, "the client refused this server's certificate"},
		{"no client certificate", mtlsServer, Client{CAFile: pki.CA}, "the client sent no certificate, or one not signed by --tls-client-ca"},
		// The Go client withholds a certificate whose CA the listener
		// does not name, and the listener logged that the client gave
		// none (found by a tester).
		{
			"client certificate of another CA", mtlsServer,
			Client{CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey},
			"the client sent no certificate, or one not signed by --tls-client-ca (Go clients withhold a certificate",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs syncbuf.Buffer
			addr := serveTLSLogged(t, tt.server, slog.New(slog.NewTextHandler(&logs, nil)))
			if err := check(t, addr, tt.client); err == nil {
				t.Fatal("health check passed, want it refused")
			}
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(logs.String(), tt.wantHint) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			log := logs.String()
			if !strings.Contains(log, "TLS handshake refused") || !strings.Contains(log, tt.wantHint) || !strings.Contains(log, "listener="+addr) {
				t.Fatalf("server log:\n%s\nwant a refused handshake on %s with the hint %q", log, addr, tt.wantHint)
			}
		})
	}
	t.Run("port probe", func(t *testing.T) {
		t.Parallel()
		var logs syncbuf.Buffer
		addr := serveTLSLogged(t, tlsServer, slog.New(slog.NewTextHandler(&logs, nil)))
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.Close()
		if err := check(t, addr, Client{CAFile: pki.CA}); err != nil {
			t.Fatal(err) // after the probe's handshake has ended
		}
		if strings.Contains(logs.String(), "handshake") {
			t.Errorf("a connection closed without a word was logged:\n%s", logs.String())
		}
	})
}

// TestRefusalsBetweenLinesAreCounted: at most one line per interval;
// the next line counts the refusals it did not log.
func TestRefusalsBetweenLinesAreCounted(t *testing.T) {
	t.Parallel()
	var logs syncbuf.Buffer
	h := newHandshakeLog(insecure.NewCredentials(), slog.New(slog.NewTextHandler(&logs, nil)), false)
	h.every = &ratelog.Lines[string]{Interval: 200 * time.Millisecond}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	refused := errors.New("tls: first record does not look like a TLS handshake")
	for range 3 {
		h.report(a, refused)
	}
	time.Sleep(300 * time.Millisecond)
	h.report(a, refused)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "more_refused") || !strings.Contains(lines[1], "more_refused_since_last_line=2") {
		t.Fatalf("log:\n%s\nwant two lines, the second counting the 2 refusals between them", logs.String())
	}
}
