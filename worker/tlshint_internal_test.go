package worker

import (
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// TestTLSHint: the reconnect warning of a worker whose TLS does not match
// sluice's --worker-listen says what to change; it logged the raw
// handshake error, again and again, naming nothing (found in a
// walkthrough). final: only the worker's own settings can heal it, and
// Connect returns ErrRefused; a broken pipe got no hint, and an expired
// certificate was retried for ever (found by a tester).
func TestTLSHint(t *testing.T) {
	t.Parallel()
	expired := tlstest.NewUntil(t, time.Now().Add(-time.Hour))
	valid := tlstest.New(t)
	withCert := func(f tlstest.Files) *tls.Config {
		kp, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
	}
	caOnly := &tls.Config{MinVersion: tls.VersionTLS12}
	tests := []struct {
		name  string
		err   string
		cfg   *tls.Config
		want  string // "" for no hint
		final bool
	}{
		{"plain text to TLS", `rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: EOF"`, nil, "dial it with TLS", false},
		{"TLS to plain text", `… tls: first record does not look like a TLS handshake`, caOnly, "serves plain text", true},
		{"untrusted server", `… tls: failed to verify certificate: x509: certificate signed by unknown authority`, caOnly, "did not sign sluice's certificate", true},
		{"no client certificate", `… remote error: tls: certificate required`, caOnly, "--tls-client-ca", true},
		{"certificate withheld", `… remote error: tls: certificate required`, withCert(valid), "use one signed by a CA in its --tls-client-ca", false},
		{"alert lost, no certificate", `… write: broken pipe`, caOnly, "give the worker one a CA in it signed", false},
		{"alert lost, certificate given", `… write: broken pipe`, withCert(valid), "check that a CA in it signed the worker's --tls-cert", false},
		{"alert lost, certificate expired", `… write: broken pipe`, withCert(expired), "client certificate (--tls-cert) CN=sluice-test-client expired at", true},
		{"certificate expired", `… remote error: tls: expired certificate`, withCert(expired), "CN=sluice-test-client expired at", true},
		{"sluice's certificate expired", `… x509: certificate has expired or is not yet valid: current time …`, caOnly, "sluice's certificate (its --tls-cert) has expired", false},
		{"sluice restarting", `… connection refused`, nil, "", false},
		{"EOF with TLS on", `… error reading server preface: EOF`, caOnly, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, final := tlsHint(errors.New(tc.err), tc.cfg)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) || final != tc.final {
				t.Fatalf("tlsHint(%q) = %q, final %t; want one saying %q, final %t", tc.err, got, final, tc.want, tc.final)
			}
		})
	}
}
