package node

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/pull"
	"github.com/sluice-dev/sluice/tenant"
)

// PullFlags configure the pull-worker listener (package pull), used when
// the drainers have no push target (--worker-addr, --webhook-url) and no
// --log-sink.
type PullFlags struct {
	Listen       string
	LeaseTimeout time.Duration
}

// Register adds --worker-listen and --worker-lease-timeout to fs.
func (f *PullFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Listen, "worker-listen", "127.0.0.1:7072", "address pull workers connect to (sluice.worker.v1.PullService), when no --worker-addr, --webhook-url or --log-sink is given")
	flagconf.DurationVar(fs, &f.LeaseTimeout, "worker-lease-timeout", pull.LeaseTimeoutDefault, "how long a pull worker may hold a job without answering or extending it before the attempt fails (a worker may ask for another in its Hello)")
}

// Validate checks the pull flags, naming the flag to fix.
func (f PullFlags) Validate() error {
	if f.LeaseTimeout <= 0 || f.LeaseTimeout > 12*time.Hour {
		return fmt.Errorf("--worker-lease-timeout %s: must be positive and at most 12h", f.LeaseTimeout)
	}
	return nil
}

// CheckPushTarget refuses a --worker-addr that is this process's own
// --worker-listen: that address serves pull workers (PullService), not a
// push worker (WorkerService), and with a push target it is not even
// opened. SLUICE_WORKER_ADDR was the usual way there: pull workers
// (sluicectl worker, examples/worker) read it as the pull address to
// connect to before SLUICE_PULL_ADDR, and still do when that is unset;
// the binaries read it as --worker-addr (found in review: every job was
// pushed to nothing, retried and dead-lettered, and no pull worker was
// served).
func CheckPushTarget(t Target, p PullFlags) error {
	if t.WorkerAddr == "" || !sameLocalAddr(t.WorkerAddr, p.Listen) {
		return nil
	}
	from := "--worker-addr " + t.WorkerAddr
	if os.Getenv("SLUICE_WORKER_ADDR") == t.WorkerAddr {
		from = "SLUICE_WORKER_ADDR=" + t.WorkerAddr + " (it sets --worker-addr here; pull workers read their address from SLUICE_PULL_ADDR: set that instead, and unset SLUICE_WORKER_ADDR for this process)"
	}
	return fmt.Errorf("%s: this is the pull-worker listener (--worker-listen %s), not a push worker; leave --worker-addr out for pull workers, or give a WorkerService's address", from, p.Listen)
}

// sameLocalAddr reports whether host:port addresses a and b name the same
// listener of this host: the same port, and the same host or two of the
// loopback and wildcard names.
func sameLocalAddr(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb {
		return false
	}
	local := func(h string) bool {
		switch strings.ToLower(h) {
		case "", "localhost", "127.0.0.1", "::1", "0.0.0.0", "::":
			return true
		}
		return false
	}
	return strings.EqualFold(ha, hb) || local(ha) && local(hb)
}

// Delivery slots by default (--concurrency 0): a push target takes this
// many calls at once; pull workers' credits are capped at the other.
const (
	PushConcurrencyDefault = 32
	PullConcurrencyDefault = 1024
)

// Concurrency resolves --concurrency: n if set, else the default of the
// delivery mode.
func (t Target) Concurrency(n int) int {
	switch {
	case n > 0:
		return n
	case t.Pull():
		return PullConcurrencyDefault
	}
	return PushConcurrencyDefault
}

// ConcurrencyUsage is --concurrency's help text.
const ConcurrencyUsage = "most jobs delivered at once; with pull workers, the ceiling on their credits (0: 32 to a push target, 1024 with pull workers)"

// WorkerKeyFile is the development worker key's file in the data
// directory: accepted while the tenant file lists no workers.
func WorkerKeyFile(dataDir string) string { return filepath.Join(dataDir, "worker-key") }

// WorkerKeys authenticates pull workers: with the tenant file's workers
// list when it has one (reloaded live), else with the development key
// (devKey, which may serve every lane).
func WorkerKeys(live *tenant.Live, devKey string) func(string) (*tenant.Worker, bool) {
	dev := &tenant.Worker{Name: "dev"}
	devSum := sha256.Sum256([]byte(devKey))
	return func(key string) (*tenant.Worker, bool) {
		cfg := live.Config()
		if len(cfg.Workers()) > 0 {
			return cfg.AuthenticateWorker(key)
		}
		sum := sha256.Sum256([]byte(key))
		if devKey != "" && subtle.ConstantTimeCompare(sum[:], devSum[:]) == 1 {
			return dev, true
		}
		return nil, false
	}
}

// pullServer is a running pull-worker listener.
type pullServer struct {
	hub    *pull.Hub
	srv    *serve.Server
	cancel context.CancelFunc
	done   chan error
}

// startPull serves hub on cfg.Pull.Listen until stop.
func startPull(ctx context.Context, cfg DrainConfig, hub *pull.Hub) (*pullServer, error) {
	lis, err := serve.Listen(cfg.Pull.Listen, "worker-listen")
	if err != nil {
		return nil, err
	}
	opts := append([]grpc.ServerOption{
		// Find dead workers' connections (a worker's SIGKILL closes its
		// socket at once; a lost host does not).
		serve.Keepalive(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, cfg.WorkerTLS...)
	srv := serve.NewServer(cfg.Logger, nil, nil, opts...)
	workerv1.RegisterPullServiceServer(srv.GRPC, hub)
	if err := hub.Start(ctx); err != nil {
		return nil, errors.Join(err, lis.Close())
	}
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &pullServer{hub: hub, srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(serveCtx, lis, time.Second) }()
	tlsMode := cfg.WorkerTLSMode
	if tlsMode == "" {
		tlsMode = "off"
	}
	cfg.Logger.InfoContext(ctx, "pull workers listening", slog.String("addr", lis.Addr().String()), slog.String("tls", tlsMode))
	if cfg.PullListening != nil {
		cfg.PullListening(lis.Addr().String())
	}
	return p, nil
}

// stop ends the workers' sessions (the jobs they hold are handed back)
// and the listener.
func (p *pullServer) stop(ctx context.Context) error {
	err := p.hub.Stop(ctx)
	p.cancel()
	return errors.Join(err, <-p.done)
}
