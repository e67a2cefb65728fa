// Package tlstest makes throwaway certificates for tests: a CA, a server
// certificate for 127.0.0.1 and localhost, and a client certificate, all
// written as PEM files, so tests can run real TLS and mutual TLS on
// loopback.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files names the PEM files of one generated set.
type Files struct {
	CA         string // the CA certificate that signed the others
	ServerCert string // valid for 127.0.0.1, ::1 and localhost
	ServerKey  string
	ClientCert string // a client certificate (CN "sluice-test-client")
	ClientKey  string
}

// New generates a CA with a server and a client certificate in a
// temporary directory of t, valid for a day. Each call makes an
// unrelated CA, with a name of its own, so two sets do not trust each
// other, and a Go client withholds its certificate from a server that
// asks for another set's (as it does from another CA in the field).
func New(t testing.TB) Files {
	t.Helper()
	return NewUntil(t, time.Now().Add(24*time.Hour))
}

// NewUntil is New with server and client certificates that expire at
// notAfter, which may be past.
func NewUntil(t testing.TB, notAfter time.Time) Files {
	t.Helper()
	now := time.Now()
	from := now // the certificates' start, before notAfter
	if notAfter.Before(now) {
		from = notAfter
	}
	caUntil := now.Add(24 * time.Hour) // the CA's end, after notAfter
	if notAfter.After(caUntil) {
		caUntil = notAfter
	}
	dir := t.TempDir()
	caKey := newKey(t)
	caSerial := serial(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: "sluice test CA " + caSerial.Text(16)},
		NotBefore:             from.Add(-2 * time.Hour),
		NotAfter:              caUntil,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{CA: filepath.Join(dir, "ca.pem")}
	writePEM(t, f.CA, "CERTIFICATE", caDER)

	leaf := func(name string, usage x509.ExtKeyUsage, server bool) (string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: serial(t),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    from.Add(-time.Hour),
			NotAfter:     notAfter,
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certPath, keyPath := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certPath, "CERTIFICATE", der)
		writePEM(t, keyPath, "PRIVATE KEY", keyDER)
		return certPath, keyPath
	}
	f.ServerCert, f.ServerKey = leaf("sluice-test-server", x509.ExtKeyUsageServerAuth, true)
	f.ClientCert, f.ClientKey = leaf("sluice-test-client", x509.ExtKeyUsageClientAuth, false)
	return f
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
