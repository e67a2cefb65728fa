// Package tlsflags turns TLS command-line settings into gRPC transport
// credentials, for the servers' listeners (--tls-cert, --tls-key,
// --tls-client-ca) and for clients (--tls-ca, --tls-cert, --tls-key,
// --tls-server-name). With no files named, everything stays plaintext, as
// suits the loopback defaults.
//
// A server with a client CA requires every client to present a
// certificate that CA signed (mutual TLS), at the handshake, before any
// call is read. Server key pairs are read again when their files change,
// so certificates can be rotated without a restart.
package tlsflags

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Server is the TLS setting of one listener.
type Server struct {
	CertFile     string // PEM certificate chain; TLS is on when set
	KeyFile      string // PEM private key of CertFile
	ClientCAFile string // PEM CA bundle; when set, clients must present a certificate it signed
}

// Register adds --<prefix>tls-cert, --<prefix>tls-key and
// --<prefix>tls-client-ca to fs; what names the listener in the help text.
func (s *Server) Register(fs *flag.FlagSet, prefix, what string) {
	fs.StringVar(&s.CertFile, prefix+"tls-cert", "", "PEM certificate (chain) to serve "+what+" over TLS; empty serves plaintext")
	fs.StringVar(&s.KeyFile, prefix+"tls-key", "", "PEM private key of --"+prefix+"tls-cert")
	fs.StringVar(&s.ClientCAFile, prefix+"tls-client-ca", "", "PEM CA bundle: require "+what+" clients to present a certificate it signed (mutual TLS)")
}

// Enabled reports whether any TLS file is named.
func (s Server) Enabled() bool { return s != Server{} }

// Or returns s, or def when s names no file: a listener's own settings
// replace the shared ones as a whole, never field by field.
func (s Server) Or(def Server) Server {
	if s.Enabled() {
		return s
	}
	return def
}

// Config returns the server TLS config, or nil when s is not enabled.
// flagPrefix names the flags in errors; log gets the certificate's
// loads, reloads and nearing expiry (keypair.go).
func (s Server) Config(flagPrefix string, log *slog.Logger) (*tls.Config, error) {
	if !s.Enabled() {
		return nil, nil
	}
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, fmt.Errorf("--%[1]stls-cert and --%[1]stls-key go together (and --%[1]stls-client-ca needs both)", flagPrefix)
	}
	kp, err := newKeyPair(s.CertFile, s.KeyFile, log.With(slog.String("listener", "--"+flagPrefix+"tls-cert")))
	if err != nil {
		return nil, fmt.Errorf("--%stls-cert/--%stls-key: %w", flagPrefix, flagPrefix, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}
	if s.ClientCAFile != "" {
		pool, err := loadPool(s.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("--%stls-client-ca: %w", flagPrefix, err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ServerOptions returns the gRPC server options for s: none when TLS is
// off. Each refused handshake is logged to log, at most one line every
// 10 s, with a hint of what the client lacks.
func (s Server) ServerOptions(flagPrefix string, log *slog.Logger) ([]grpc.ServerOption, error) {
	cfg, err := s.Config(flagPrefix, log)
	if err != nil || cfg == nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(newHandshakeLog(credentials.NewTLS(cfg), log, s.ClientCAFile != ""))}, nil
}

// Client is the TLS setting of an outgoing connection.
type Client struct {
	Enabled    bool   // TLS with the system roots even when no file is named
	CAFile     string // PEM CA bundle that signed the server's certificate; implies TLS
	CertFile   string // PEM client certificate, for servers that require one; implies TLS
	KeyFile    string // PEM private key of CertFile
	ServerName string // name to verify the server's certificate against, when it differs from the address
}

// Register adds --<prefix>tls, --<prefix>tls-ca, --<prefix>tls-cert,
// --<prefix>tls-key and --<prefix>tls-server-name to fs; what names the
// server in the help text.
func (c *Client) Register(fs *flag.FlagSet, prefix, what string) {
	fs.BoolVar(&c.Enabled, prefix+"tls", false, "connect to "+what+" over TLS, verifying it with the system's roots (implied by the other --"+prefix+"tls-* flags)")
	fs.StringVar(&c.CAFile, prefix+"tls-ca", "", "PEM CA bundle to verify "+what+"'s certificate with")
	fs.StringVar(&c.CertFile, prefix+"tls-cert", "", "PEM client certificate to present to "+what+" (for mutual TLS)")
	fs.StringVar(&c.KeyFile, prefix+"tls-key", "", "PEM private key of --"+prefix+"tls-cert")
	fs.StringVar(&c.ServerName, prefix+"tls-server-name", "", "name "+what+"'s certificate must carry, when it is not the host dialled")
}

func (c Client) on() bool { return c.Enabled || c != Client{} }

// Config returns the client TLS config, or nil when TLS is off.
func (c Client) Config(flagPrefix string) (*tls.Config, error) {
	if !c.on() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--%stls-ca: %w", flagPrefix, err)
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("--%[1]stls-cert and --%[1]stls-key go together", flagPrefix)
	}
	if c.CertFile != "" {
		kp, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--%stls-cert/--%stls-key: %w", flagPrefix, flagPrefix, err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	return cfg, nil
}

// DialOption returns the transport credentials for c: TLS, or plaintext
// when TLS is off.
func (c Client) DialOption(flagPrefix string) (grpc.DialOption, error) {
	cfg, err := c.Config(flagPrefix)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
