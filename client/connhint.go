package client

import (
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/tlshint"
)

// connHint says what to change when err, a failed call, shows that the
// client and the gateway disagree about TLS; final reports that no retry
// can heal it. gRPC reports a mismatch as UNAVAILABLE, which the client
// retried for about 8 s before returning the handshake's own words, which
// name nothing to fix (found by a tester).
func (c *Client) connHint(err error) (hint string, final bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return "", false
	}
	var own *x509.Certificate // the client's certificate, if out of date
	if c.cfg.TLS != nil {
		own = tlshint.OutOfDate(c.cfg.TLS.Certificates, time.Now())
	}
	m := tlshint.Diagnose(st.Message(), !c.cfg.Insecure, own)
	switch m {
	case tlshint.ServerWantsTLS:
		hint = "if the gateway serves TLS (it was given --tls-cert), leave Config.Insecure unset; " +
			"Config.TLS (see LoadTLS) gives a private CA and, for a gateway with --tls-client-ca, a client certificate"
	case tlshint.ServerPlaintext:
		hint = "the gateway serves plaintext: set Config.Insecure (or give the gateway --tls-cert and --tls-key)"
	case tlshint.UnknownAuthority:
		hint = "the gateway's certificate is not signed by a CA the client trusts: give that CA in Config.TLS (LoadTLS's caFile)"
	case tlshint.ClientCertRefused:
		hint = "the gateway takes only clients with a certificate signed by a CA in its --tls-client-ca: " +
			"give one in Config.TLS (LoadTLS's certFile and keyFile)"
	case tlshint.ClientCertExpired:
		if own != nil {
			hint = "the client certificate (Config.TLS, LoadTLS's certFile) " + tlshint.Validity(own, time.Now()) + ": give a current one"
		} else {
			hint = "the gateway refused the client certificate (Config.TLS, LoadTLS's certFile) as expired or not yet valid: " +
				"give a current one, or check the gateway's clock"
		}
	case tlshint.ServerCertExpired:
		hint = "the gateway's certificate (its --tls-cert) has expired or is not yet valid: renew it on the gateway " +
			"(it serves the new files within a second), or check this machine's clock"
	case tlshint.Dropped:
		hint = "the gateway closed the connection after the TLS handshake, as it does a client certificate it refuses: " +
			"if it has --tls-client-ca, give Config.TLS a certificate a CA in it signed (LoadTLS's certFile and keyFile)"
	}
	return hint, m.Certain()
}

// explain adds connHint's hint, if any, to err, or says that the address
// serves no ingest API: pointed at a drainer's worker or admin listener,
// a call failed with gRPC's bare "unknown service
// sluice.ingest.v1.IngestService" (found by a tester).
func (c *Client) explain(err error) error {
	if hint, _ := c.connHint(err); hint != "" {
		return fmt.Errorf("%w (%s)", err, hint)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented && strings.Contains(st.Message(), "unknown service sluice.ingest.v1.IngestService") {
		return fmt.Errorf("%w (the address serves no ingest API: give the gateway's --listen address, 7070 by default, "+
			"not its --worker-listen or --admin-listen, nor a drainer's)", err)
	}
	return err
}
