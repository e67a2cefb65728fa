package ctl

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// TestTLSHint: what each TLS mismatch tells the user to fix. A server
// that did not take the client's certificate said "certificate required"
// (the client sends its certificate only to a server that names its CA),
// and the hint said to add the --tls-cert that was given (found in a
// walkthrough).
func TestTLSHint(t *testing.T) {
	t.Parallel()
	withCert := tlsflags.Client{CAFile: "ca.pem", CertFile: "rogue.pem", KeyFile: "rogue-key.pem"}
	caOnly := tlsflags.Client{CAFile: "ca.pem"}
	// An expired client certificate, its alert lost or not: the hint
	// said to check the server's CA (found by a tester).
	expired := tlstest.NewUntil(t, time.Now().Add(-time.Hour))
	expiredCert := tlsflags.Client{CAFile: "ca.pem", CertFile: expired.ClientCert, KeyFile: expired.ClientKey}
	tests := []struct {
		name string
		msg  string
		c    tlsflags.Client
		want string // "" for no hint
	}{
		{"plain text to TLS", "error reading server preface: EOF", tlsflags.Client{}, "add --tls-ca"},
		{"TLS to plain text", "tls: first record does not look like a TLS handshake", caOnly, "leave out the --tls flags"},
		{"no certificate", "remote error: tls: certificate required", caOnly, "add --tls-cert and --tls-key"},
		{"a certificate of another CA", "remote error: tls: certificate required", withCert, "it did not take --tls-cert: use a certificate signed by a CA in its --tls-client-ca (the admin listener's: --admin-tls-client-ca"},
		{"alert lost, certificate given", "write: broken pipe", withCert, "check that a CA in its --tls-client-ca (the admin listener's"},
		{"alert lost, no certificate", "write: broken pipe", caOnly, "add --tls-cert and --tls-key"},
		{"untrusted certificate", "remote error: tls: unknown certificate authority", withCert, "does not trust --tls-cert"},
		{"not TLS at all", "connection refused", tlsflags.Client{}, ""},
		{"expired certificate, alert lost", "write: broken pipe", expiredCert, "--tls-cert CN=sluice-test-client expired at"},
		{"expired certificate", "remote error: tls: expired certificate", expiredCert, "--tls-cert CN=sluice-test-client expired at"},
		{"expired certificate, not read", "remote error: tls: expired certificate", withCert, "it refused --tls-cert as expired or not yet valid"},
		{"expired server certificate", "x509: certificate has expired or is not yet valid: current time", caOnly, "its certificate (its --tls-cert) has expired"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tlsHint(tc.msg, tc.c)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("tlsHint(%q) = %q, want one saying %q", tc.msg, got, tc.want)
			}
		})
	}
}
