package tlshint

import "testing"

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		msg   string
		tlsOn bool
		want  Mismatch
	}{
		{"plain text to TLS", `connection error: desc = "error reading server preface: EOF"`, false, ServerWantsTLS},
		{"EOF with TLS on", `error reading server preface: EOF`, true, None},
		{"TLS to plain text", `authentication handshake failed: tls: first record does not look like a TLS handshake`, true, ServerPlaintext},
		{"TLS error without TLS", `first record does not look like a TLS handshake`, false, None},
		{"untrusted server", `tls: failed to verify certificate: x509: certificate signed by unknown authority`, true, UnknownAuthority},
		{"no client certificate", `remote error: tls: certificate required`, true, ClientCertRefused},
		{"client certificate of another CA", `remote error: tls: unknown certificate authority`, true, ClientCertRefused},
		{"restarting", `dial tcp 127.0.0.1:7070: connect: connection refused`, false, None},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Classify(tc.msg, tc.tlsOn); got != tc.want {
				t.Errorf("Classify(%q, tls %t) = %d, want %d", tc.msg, tc.tlsOn, got, tc.want)
			}
		})
	}
}

func TestCertain(t *testing.T) {
	t.Parallel()
	for m, want := range map[Mismatch]bool{None: false, ServerWantsTLS: false, ServerPlaintext: true, UnknownAuthority: true, ClientCertRefused: true} {
		if got := m.Certain(); got != want {
			t.Errorf("Mismatch(%d).Certain() = %t, want %t", m, got, want)
		}
	}
}
