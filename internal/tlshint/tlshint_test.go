package tlshint

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

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
		{"client certificate expired", `error reading server preface: remote error: tls: expired certificate`, true, ClientCertExpired},
		{"server certificate expired", `tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time 2026-11-29T16:00:15Z is after 2026-11-29T15:00:15Z`, true, ServerCertExpired},
		{"alert lost", `write tcp 127.0.0.1:59146->127.0.0.1:45927: write: broken pipe`, true, Dropped},
		{"reset", `read tcp 127.0.0.1:59146->127.0.0.1:45927: read: connection reset by peer`, true, Dropped},
		{"broken pipe without TLS", `write: broken pipe`, false, ServerWantsTLS},
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
	for m, want := range map[Mismatch]bool{
		None: false, ServerWantsTLS: false, ServerPlaintext: true, UnknownAuthority: true, ClientCertRefused: true,
		ClientCertExpired: true, ServerCertExpired: true, Dropped: false,
	} {
		if got := m.Certain(); got != want {
			t.Errorf("Mismatch(%d).Certain() = %t, want %t", m, got, want)
		}
	}
}

// TestDiagnose: a client whose own certificate has expired, or is not yet
// valid, is told so whichever way the refusal reached it; with the alert
// lost it was "write: broken pipe" and a hint about another CA (found by
// a tester).
func TestDiagnose(t *testing.T) {
	t.Parallel()
	now := time.Now()
	expired := tlstest.NewUntil(t, now.Add(-time.Hour))
	valid := tlstest.New(t)
	load := func(f tlstest.Files) []tls.Certificate {
		kp, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		kp.Leaf = nil // as a hand-made tls.Certificate may come
		return []tls.Certificate{kp}
	}
	own := OutOfDate(load(expired), now)
	if own == nil {
		t.Fatal("OutOfDate found the expired certificate valid")
	}
	if got := FileOutOfDate(expired.ClientCert, now); got == nil || !got.Equal(own) {
		t.Fatalf("FileOutOfDate = %v, want the expired certificate", got)
	}
	if OutOfDate(load(valid), now) != nil || FileOutOfDate(valid.ClientCert, now) != nil || FileOutOfDate("/nonexistent", now) != nil {
		t.Fatal("a valid or missing certificate was found out of date")
	}
	if early := OutOfDate(load(valid), now.Add(-3*time.Hour)); early == nil || !strings.Contains(Validity(early, now.Add(-3*time.Hour)), "is not valid before") {
		t.Fatalf("a certificate before its NotBefore: %v", early)
	}
	if v := Validity(own, now); !strings.Contains(v, "CN=sluice-test-client expired at ") {
		t.Fatalf("Validity = %q", v)
	}
	tests := []struct {
		name string
		msg  string
		own  bool
		want Mismatch
	}{
		{"alert lost", "write: broken pipe", true, ClientCertExpired},
		{"reset", "read: connection reset by peer", true, ClientCertExpired},
		{"certificate required", "remote error: tls: certificate required", true, ClientCertExpired},
		{"alert", "remote error: tls: expired certificate", false, ClientCertExpired},
		{"valid certificate, alert lost", "write: broken pipe", false, Dropped},
		{"untrusted server", "x509: certificate signed by unknown authority", true, UnknownAuthority},
		{"restarting", "connect: connection refused", true, None},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			leaf := own
			if !tc.own {
				leaf = nil
			}
			if got := Diagnose(tc.msg, true, leaf); got != tc.want {
				t.Errorf("Diagnose(%q, own %t) = %d, want %d", tc.msg, tc.own, got, tc.want)
			}
		})
	}
}
