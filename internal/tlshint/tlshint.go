// Package tlshint recognises, in the text of a gRPC connection error, a
// client and server that disagree about TLS, so that package client and
// package worker can say what to change. gRPC reports such a mismatch
// only as UNAVAILABLE with the handshake's own words ("error reading
// server preface: EOF"), which name nothing to fix.
package tlshint

import "strings"

// Mismatch is what a connection error says about the TLS of the two ends.
type Mismatch int

const (
	// None: the error says nothing about TLS.
	None Mismatch = iota
	// ServerWantsTLS: a plain-text client's connection was closed before
	// the server's first frame, as a TLS server does. A server or proxy
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
)

// Classify reads msg, a connection error's text, from a client that dials
// with TLS (tlsOn) or without.
func Classify(msg string, tlsOn bool) Mismatch {
	switch {
	case !tlsOn && strings.Contains(msg, "error reading server preface"):
		return ServerWantsTLS
	case tlsOn && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return ServerPlaintext
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return UnknownAuthority
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"), strings.Contains(msg, "unknown certificate authority"):
		return ClientCertRefused
	}
	return None
}

// Certain reports whether m is a mismatch that no retry can heal before
// the configuration changes. ServerWantsTLS is not: a server that is
// stopping closes connections the same way.
func (m Mismatch) Certain() bool { return m != None && m != ServerWantsTLS }
