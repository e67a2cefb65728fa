package node

import (
	"errors"
	"flag"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/internal/tlsflags"
)

// TLSFlags are a process's TLS settings: --tls-* for every gRPC listener,
// --admin-tls-* replacing them for the admin listener (say, to require
// operators' client certificates there), and --worker-tls-* for the
// connection to a gRPC worker. Nothing set means plaintext everywhere.
type TLSFlags struct {
	shared, admin tlsflags.Server
	worker        tlsflags.Client
}

// Register adds the TLS flags to fs.
func (f *TLSFlags) Register(fs *flag.FlagSet) {
	f.shared.Register(fs, "", "the gRPC APIs")
	f.admin.Register(fs, "admin-", "the admin API (instead of --tls-*)")
	f.worker.Register(fs, "worker-", "the gRPC worker")
}

// TLS is the resolved TLS setting of a process.
type TLS struct {
	// Ingest and Admin are the server options of each listener (empty:
	// plaintext); pass them to serve.NewServer.
	Ingest, Admin []grpc.ServerOption
	// IngestMode and AdminMode say what each listener does, for its
	// "listening" log line: "off", "tls" or "mtls".
	IngestMode, AdminMode string
	// Worker dials the gRPC worker.
	Worker grpc.DialOption
}

// Resolve loads the certificates the flags name; errors name the flag.
// The listeners log refused handshakes to log.
func (f *TLSFlags) Resolve(log *slog.Logger) (TLS, error) {
	var out TLS
	var err error
	if out.Ingest, err = f.shared.ServerOptions("", log); err != nil {
		return TLS{}, err
	}
	admin := f.shared
	out.Admin = out.Ingest // one reader of the shared files, one log of their loads
	if f.admin.Enabled() {
		admin = f.admin
		if out.Admin, err = admin.ServerOptions("admin-", log); err != nil {
			return TLS{}, err
		}
	}
	if out.Worker, err = f.worker.DialOption("worker-"); err != nil {
		return TLS{}, err
	}
	out.IngestMode, out.AdminMode = mode(f.shared), mode(admin)
	return out, nil
}

func mode(s tlsflags.Server) string {
	switch {
	case !s.Enabled():
		return "off"
	case s.ClientCAFile != "":
		return "mtls"
	}
	return "tls"
}

// CheckWorkerTLS refuses --worker-tls-* without --worker-addr: they
// only dial a push worker. They were ignored otherwise, and the
// pull-worker listener an operator meant to secure with them stayed
// plaintext (found in review); that listener takes --tls-*.
func (f *TLSFlags) CheckWorkerTLS(t Target) error {
	if t.WorkerAddr != "" || f.worker == (tlsflags.Client{}) {
		return nil
	}
	return errors.New("--worker-tls, --worker-tls-ca, --worker-tls-cert, --worker-tls-key and --worker-tls-server-name dial the push worker of --worker-addr, and none is given; " +
		"pull workers connect to --worker-listen, which serves TLS with --tls-cert and --tls-key (and --tls-client-ca for their certificates)")
}
