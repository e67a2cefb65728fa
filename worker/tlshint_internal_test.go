package worker

import (
	"errors"
	"strings"
	"testing"
)

// TestTLSHint: the reconnect warning of a worker whose TLS does not match
// sluice's --worker-listen says what to change; it logged the raw
// handshake error, again and again, naming nothing (found in a
// walkthrough).
func TestTLSHint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   string
		tlsOn bool
		want  string // "" for no hint
	}{
		{"plain text to TLS", `rpc error: code = Unavailable desc = connection error: desc = "error reading server preface: EOF"`, false, "dial it with TLS"},
		{"TLS to plain text", `… tls: first record does not look like a TLS handshake`, true, "serves plain text"},
		{"untrusted server", `… tls: failed to verify certificate: x509: certificate signed by unknown authority`, true, "did not sign sluice's certificate"},
		{"no client certificate", `… remote error: tls: certificate required`, true, "--tls-client-ca"},
		{"sluice restarting", `… connection refused`, false, ""},
		{"EOF with TLS on", `… error reading server preface: EOF`, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := tlsHint(errors.New(tc.err), tc.tlsOn)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("tlsHint(%q, tls %t) = %q, want one saying %q", tc.err, tc.tlsOn, got, tc.want)
			}
		})
	}
}
