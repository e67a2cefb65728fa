// Package tlshint recognises, in the text of a gRPC connection error, a
// client and server that disagree about TLS, so that package client and
// package worker can say what to change. gRPC reports such a mismatch
// only as UNAVAILABLE with the handshake's own words ("error reading
// server preface: EOF"), which name nothing to fix.
//
// A certificate out of its validity is told apart from one of another
// CA: by the server's alert ("expired certificate"), by the client's own
// check of the server's ("certificate has expired or is not yet valid"),
// and, when the alert is lost, by the client's own certificate's NotBefore
// and NotAfter (Diagnose). The client's certificate is looked at when a
// connection fails, not when the client is built: one valid then can
// expire in a long-running process, and an expired one is harmless to a
// server that asks for none (Go sends a client certificate only when
// asked).
package tlshint

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"time"
)

// Mismatch is what a connection error says about the TLS of the two ends.
type Mismatch int

const (
	// None: the error says nothing about TLS.
	None Mismatch = iota
	// ServerWantsTLS: a plain-text client's connection was closed before
	// the server's first frame (or under its first writes: "broken
	// pipe"), as a TLS server does. A server or proxy
	// that closed it for another reason (one stopping) looks the same, so
	// it is only likely.
	ServerWantsTLS
	// ServerPlaintext: a TLS client got a reply that is not TLS; the
	// server speaks plain text.
	ServerPlaintext
	// UnknownAuthority: the server's certificate is not signed by a CA
	// the client trusts.
	UnknownAuthority
	// ClientCertRefused: the server requires a client certificate signed
	// by a CA it trusts, and did not get one.
	ClientCertRefused
	// ClientCertExpired: the server refused the client's certificate as
	// expired (or not yet valid), or the client's own certificate is out
	// of its validity and the connection failed as a refused
	// certificate's does (Diagnose).
	ClientCertExpired
	// ServerCertExpired: the server's certificate has expired or is not
	// yet valid, by the client's clock.
	ServerCertExpired
	// Dropped: a TLS connection was closed or reset just after the
	// handshake ("write: broken pipe", "connection reset by peer"). A TLS
	// 1.3 server checks the client's certificate after the client has
	// sent its Finished, so a refused certificate often shows so, its
	// alert lost. A server stopping looks the same, so it is only likely.
	Dropped
)

// Classify reads msg, a connection error's text, from a client that dials
// with TLS (tlsOn) or without.
func Classify(msg string, tlsOn bool) Mismatch {
	switch {
	case !tlsOn && (strings.Contains(msg, "error reading server preface") || closed(msg)):
		// A TLS server closes a plaintext client's connection on its
		// first bytes; the client's next write can meet the closed socket.
		return ServerWantsTLS
	case tlsOn && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return ServerPlaintext
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return UnknownAuthority
	case strings.Contains(msg, "certificate has expired or is not yet valid"):
		return ServerCertExpired
	case strings.Contains(msg, "remote error: tls: expired certificate"):
		return ClientCertExpired
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"), strings.Contains(msg, "unknown certificate authority"):
		return ClientCertRefused
	case tlsOn && closed(msg):
		return Dropped
	}
	return None
}

// closed reports whether msg is a connection the other end closed or
// reset under a write or read.
func closed(msg string) bool {
	return strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer")
}

// Diagnose is Classify for a client whose own certificate's leaf is own
// (nil: it has none, or none out of date; see OutOfDate): a connection
// that failed as a refused client certificate's does, by a client whose
// certificate has expired or is not yet valid, is ClientCertExpired. With
// the alert lost (Dropped) the error named nothing, and a client told of
// another CA looked for the wrong fault (found by a tester).
func Diagnose(msg string, tlsOn bool, own *x509.Certificate) Mismatch {
	m := Classify(msg, tlsOn)
	if own != nil && (m == ClientCertRefused || m == Dropped) {
		return ClientCertExpired
	}
	return m
}

// Certain reports whether m is a mismatch that no retry can heal before
// the configuration changes. ServerWantsTLS and Dropped are not: a server
// that is stopping closes connections the same way.
func (m Mismatch) Certain() bool { return m != None && m != ServerWantsTLS && m != Dropped }

// OutOfDate returns the leaf of the first of certs (a tls.Config's
// Certificates) that is not valid at now, or nil.
func OutOfDate(certs []tls.Certificate, now time.Time) *x509.Certificate {
	for _, c := range certs {
		leaf := c.Leaf
		if leaf == nil && len(c.Certificate) > 0 {
			leaf, _ = x509.ParseCertificate(c.Certificate[0])
		}
		if leaf != nil && (now.After(leaf.NotAfter) || now.Before(leaf.NotBefore)) {
			return leaf
		}
	}
	return nil
}

// FileOutOfDate is OutOfDate for the first certificate of a PEM file (a
// --tls-cert); nil also when the file does not read or parse.
func FileOutOfDate(path string, now time.Time) *x509.Certificate {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil
		}
		if block.Type == "CERTIFICATE" {
			return OutOfDate([]tls.Certificate{{Certificate: [][]byte{block.Bytes}}}, now)
		}
	}
}

// Validity says how leaf, out of date at now, is so: "CN=… expired at
// 2026-11-29T15:00:00Z" or "CN=… is not valid before …".
func Validity(leaf *x509.Certificate, now time.Time) string {
	if now.Before(leaf.NotBefore) {
		return fmt.Sprintf("%s is not valid before %s (or this machine's clock is behind)", leaf.Subject, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s expired at %s", leaf.Subject, leaf.NotAfter.UTC().Format(time.RFC3339))
}
