// Command gateway runs sluice's front door. With no flags it is a complete
// single-node system: the embedded durable backend under ./data, a
// development tenant whose key it prints, and in-process drainers that
// serve pull workers on --worker-listen (or push to --worker-addr, a
// --webhook-url, or a --log-sink that logs each job).
//
// Every flag can also be set as SLUICE_<FLAG> in the environment or as
// <flag>: value in the YAML file named by --config.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/drainer"
	"github.com/sluice-dev/sluice/gateway"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/node"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

func main() {
	hup := node.NotifyHUP() // first: a SIGHUP during start-up is a reload, not the end
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown; a second one ends the
	// process at once (it was swallowed until the shutdown ended).
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], hup, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

type config struct {
	listen        string
	adminListen   string
	backend       node.BackendFlags
	tenants       string
	queues        string
	target        node.Target
	pull          node.PullFlags
	observe       node.ObserveFlags
	policy        sideliner.Policy
	sidelineShare int
	readAhead     int
	drain         bool
	concurrency   int
	adminKey      string
	logLevel      string
	shutdownGrace time.Duration
	idemWindow    time.Duration
	depthInterval time.Duration
	tls           node.TLSFlags
	console       node.ConsoleFlags
	strayEnv      []string // warnings: SLUICE_* variables that set nothing
}

func parse(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = flagconf.Usage(fs)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7070", "address of the ingest gRPC API")
	fs.StringVar(&c.adminListen, "admin-listen", "127.0.0.1:7071", "address of the admin gRPC API (in-process drainers)")
	c.backend.Register(fs)
	fs.StringVar(&c.tenants, "tenants", "", "tenant config file (YAML); empty runs with one development tenant")
	fs.StringVar(&c.queues, "queues", "", "queue topology file (YAML, the Terraform module's output); empty uses lanes premium, standard, free")
	c.target.Register(fs)
	c.pull.Register(fs)
	fs.BoolVar(&c.drain, "drain", true, "run drainers in this process")
	fs.IntVar(&c.concurrency, "concurrency", 0, node.ConcurrencyUsage)
	fs.StringVar(&c.adminKey, "admin-key", "", "admin API key; empty uses (and creates) <data-dir>/admin-key")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	flagconf.DurationVar(fs, &c.shutdownGrace, "shutdown-grace", 30*time.Second, "how long SIGTERM waits for calls and deliveries in flight")
	flagconf.DurationVar(fs, &c.idemWindow, "idempotency-window", gateway.IdempotencyWindowDefault, "how long an idempotency key is remembered")
	flagconf.DurationVar(fs, &c.depthInterval, "depth-interval", 0, "how often queue depths are read for routing and the high-water mark (default 1s embedded, 10s on SQS, where each read is a billed call per queue)")
	node.PolicyFlags(fs, &c.policy, &c.sidelineShare, &c.readAhead)
	c.observe.Register(fs, "127.0.0.1:9090")
	c.tls.Register(fs)
	c.console.Register(fs)
	fs.String("config", "", "YAML file of settings (keys are flag names)")
	if err := flagconf.Parse(fs, args, "SLUICE", "config"); err != nil {
		return c, err
	}
	c.strayEnv = flagconf.StrayEnv(fs, "SLUICE", os.Environ())
	if c.concurrency < 0 {
		return c, fmt.Errorf("--concurrency %d: must be at least 1 (or 0 for the default)", c.concurrency)
	}
	switch {
	case c.shutdownGrace <= 0:
		return c, fmt.Errorf("--shutdown-grace %s: must be positive, such as 30s (calls and deliveries in flight need time to end)", c.shutdownGrace)
	case c.idemWindow <= 0:
		// 0 was the default, 10m, so an operator's 0 meant to turn
		// deduplication off kept it on (found in review).
		return c, fmt.Errorf("--idempotency-window %s: must be positive, such as %s (the default); deduplication cannot be turned off, but a job submitted without an idempotency key is never deduplicated", c.idemWindow, gateway.IdempotencyWindowDefault)
	case c.depthInterval < 0:
		return c, fmt.Errorf("--depth-interval %s: must not be negative (0 for the default: 1s embedded, 10s on SQS)", c.depthInterval)
	}
	if err := errors.Join(c.console.Validate(), c.observe.Validate(), c.pull.Validate(), node.CheckPolicyFlags(c.policy, c.sidelineShare, c.readAhead), c.target.Validate(), node.CheckHandlerTimeout(c.backend.Kind, c.target), node.CheckPushTarget(c.target, c.pull), c.tls.CheckWorkerTLS(c.target)); err != nil {
		return c, err
	}
	if err := c.policy.Validate(); err != nil { // what the flags' own checks missed
		return c, err
	}
	c.concurrency = c.target.Concurrency(c.concurrency)
	return c, nil
}

// run runs the gateway until ctx ends; hup's values reload the tenant
// file (node.NotifyHUP). ctx ending during start-up is a stop, not an
// error.
func run(ctx context.Context, args []string, hup <-chan os.Signal, stdout, stderr io.Writer) (err error) {
	defer func() { err = node.Stopped(ctx, err) }()
	c, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log, err := serve.NewLogger(stderr, c.logLevel)
	if err != nil {
		return err
	}
	for _, w := range c.strayEnv {
		log.Warn(w)
	}
	tlsCfg, err := c.tls.Resolve(log)
	if err != nil {
		return err
	}
	topo, err := node.LoadTopology(c.queues, log)
	if err != nil {
		return err
	}
	// Made before the keys are written in it; OpenBackend then tells a
	// new store from one this host had.
	if err := c.backend.MakeDataDir(); err != nil {
		return err
	}
	// The admin and read-only keys are read before the tenant file, whose
	// tenants and workers may not have them.
	var adminKey string
	if c.drain {
		if adminKey, err = node.AdminKey(c.adminKey, c.backend.DataDir); err != nil {
			return err
		}
	}
	roKey, err := c.console.ReadOnlyKey()
	if err != nil {
		return err
	}
	tenants, devKey, err := openTenants(c, topo, node.ReservedKey{Name: "the admin key", Key: adminKey}, node.ReservedKey{Name: "the console's read-only key", Key: roKey})
	if err != nil {
		return err
	}

	backend, err := node.OpenBackend(ctx, c.backend, topo, log)
	if err != nil {
		return err
	}
	defer node.CloseBackend(backend, log)
	topo = node.WithRetiredShards(ctx, backend, topo, log)

	obs, err := node.StartObserver(ctx, c.observe, backend, topo, log)
	if err != nil {
		return err
	}
	defer node.StopOnExit(obs, 10*time.Second, log)
	node.WatchTenants(ctx, tenants, hup, obs.Metrics, log)

	interval := c.depthInterval
	if interval == 0 && c.backend.Kind == "sqs" {
		interval = 10 * time.Second
	}
	depths := depth.New(depth.Config{Backend: backend, Queues: topo.Names(), Interval: interval, Logger: log, Observe: obs.ObserveDepth})
	if err := depths.Start(ctx); err != nil {
		return fmt.Errorf("read queue depths: %w", err)
	}
	defer node.StopOnExit(depths, 10*time.Second, log)

	gwCfg := gateway.Config{
		Backend:           backend,
		Topology:          topo,
		Tenants:           tenants.Config,
		Depth:             depths,
		IdempotencyWindow: c.idemWindow,
		Metrics:           obs.Metrics,
		Logger:            log,
	}
	if c.drain {
		// The in-process drainers count deliveries in the same metrics:
		// backlog refusals' retry hints follow what they achieve.
		gwCfg.DrainRate = metrics.NewDeliveryRate(obs.Metrics.Delivered, 0).Rate
	} else if c.backend.Kind == "embedded" {
		// It took jobs without a word, and a drainer cannot open the
		// store while it runs (found in a walkthrough).
		log.Warn(undrainedEmbedded)
	}
	gw, err := gateway.New(gwCfg)
	if err != nil {
		return err
	}
	if err := gw.Start(ctx); err != nil {
		return err
	}
	defer node.StopOnExit(gw, 10*time.Second, log)

	consoleURL := make(chan string, 1)
	pullAddr := make(chan string, 1)
	consoleOn := false
	// Everything that can fail is set up before the ingest server starts:
	// an error after it would return with the server still serving.
	var workerKey string
	var handler drainer.Handler
	var consoleHook node.ConsoleHook
	if c.drain {
		c.target.WorkerDial = tlsCfg.Worker
		var closeHandler func() error
		handler, closeHandler, err = node.Handler(c.target, log)
		if err != nil {
			return err
		}
		defer func() { _ = closeHandler() }()
		consoleHook, err = c.console.ConsoleHook(adminKey, len(tlsCfg.Admin) > 0, log, func(u string) { consoleURL <- u })
		if err != nil {
			return err
		}
		consoleOn = consoleHook != nil
		if handler == nil {
			if workerKey, err = node.SecretFile(node.WorkerKeyFile(c.backend.DataDir), "sk_worker_"); err != nil {
				return err
			}
		}
	}

	lis, err := serve.Listen(c.listen, "listen")
	if err != nil {
		return err
	}
	auth := func() gateway.Authenticator { return tenants.Config() }
	// Keys are checked from the headers before a request body is read.
	ingestOpts := append([]grpc.ServerOption{grpc.InTapHandle(gateway.TapAuth(auth, obs.Metrics))}, tlsCfg.Ingest...)
	srv := serve.NewServer(log, []grpc.UnaryServerInterceptor{gateway.UnaryAuth(auth)}, []grpc.StreamServerInterceptor{gateway.StreamAuth(auth)}, ingestOpts...)
	ingestv1.RegisterIngestServiceServer(srv.GRPC, gw)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(gctx, lis, c.shutdownGrace) })
	log.InfoContext(ctx, "gateway listening", slog.String("addr", lis.Addr().String()), slog.String("backend", c.backend.Kind), slog.Int("lanes", len(topo.Lanes)), slog.String("tls", tlsCfg.IngestMode))

	if c.drain {
		g.Go(func() error {
			return node.RunDrain(gctx, node.DrainConfig{
				Backend: backend, Topology: topo, Handler: handler, HandlerTimeout: c.target.HandlerTimeout, Tenants: tenants, Concurrency: c.concurrency,
				Policy: c.policy, SidelineShare: c.sidelineShare, ReadAhead: c.readAhead, ReceiveLinger: c.backend.DrainReceiveLinger(), Metrics: obs.Metrics,
				AdminListen: c.adminListen, AdminKey: adminKey, ShutdownGrace: c.shutdownGrace, Logger: log,
				AdminTLS: tlsCfg.Admin, AdminTLSMode: tlsCfg.AdminMode, Console: consoleHook,
				Pull: c.pull, WorkerKeys: node.WorkerKeys(tenants, workerKey), WorkerTLS: tlsCfg.Ingest, WorkerTLSMode: tlsCfg.IngestMode,
				PullListening: func(addr string) { pullAddr <- addr },
			})
		})
	}
	if devKey != "" {
		console := ""
		if consoleOn {
			select { // the console listens as the drainers start
			case console = <-consoleURL:
			case <-gctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
		workers := ""
		if c.drain && c.target.Pull() {
			select { // the pull listener opens as the drainers start
			case workers = <-pullAddr:
			case <-gctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
		adminKeyFrom := "the admin key in " + filepath.Join(c.backend.DataDir, "admin-key")
		if c.adminKey != "" {
			adminKeyFrom = "the admin key given with --admin-key"
		}
		printWelcome(stdout, welcome{
			addr: lis.Addr().String(), key: devKey, mode: describe(c), consoleURL: console,
			adminKeyFrom: adminKeyFrom, workerAddr: workers,
			workerKeyFile: node.WorkerKeyFile(c.backend.DataDir), tlsMode: tlsCfg.IngestMode,
		})
	}
	err = g.Wait()
	log.Info("gateway stopped")
	return err
}

// openTenants loads --tenants (reloaded on SIGHUP and when the file
// changes), whose keys may not be one of reserved, or builds the
// development tenant with a key kept in the data directory.
func openTenants(c config, topo topology.Topology, reserved ...node.ReservedKey) (*tenant.Live, string, error) {
	if c.tenants != "" {
		live, err := node.OpenTenants(c.tenants, topo, nil, reserved...)
		return live, "", err
	}
	key, err := node.SecretFile(filepath.Join(c.backend.DataDir, "dev-api-key"), "sk_dev_")
	if err != nil {
		return nil, "", err
	}
	cfg, err := tenant.Parse(fmt.Appendf(nil, "tenants:\n  - id: dev\n    tier: standard\n    api_keys: [%q]\n", key))
	if err != nil {
		return nil, "", err
	}
	live, err := node.OpenTenants("", topo, cfg)
	return live, key, err
}

// undrainedEmbedded is the warning of a gateway on the embedded backend
// started with --drain=false.
const undrainedEmbedded = "--drain=false on the embedded backend: nothing delivers the jobs this gateway accepts while it runs " +
	"(no other process can open its data directory), and it serves no admin API, worker listener or console; " +
	"restart it without --drain=false to deliver them"

// describe says in a few words where jobs go.
func describe(c config) string {
	var delivery string
	switch {
	case !c.drain && c.backend.Kind == "embedded":
		delivery = "no drainers: jobs wait until this gateway runs without --drain=false (no other process can open its data directory)"
	case !c.drain:
		delivery = "no drainers in this process (run cmd/drainer)"
	case c.target.WorkerAddr != "":
		delivery = "delivering to the worker at " + c.target.WorkerAddr
	case c.target.WebhookURL != "":
		delivery = "delivering to " + c.target.WebhookURL
	case c.target.LogSink:
		delivery = "jobs logged as they are delivered"
	default:
		delivery = "jobs wait for pull workers"
	}
	return c.backend.Kind + " backend, " + delivery
}

// welcome is what the first screen tells a newcomer.
type welcome struct {
	addr, key, mode, consoleURL string
	adminKeyFrom                string // where the console's sign-in key is
	// workerAddr is where pull workers connect ("" when jobs are pushed).
	workerAddr, workerKeyFile string
	// tlsMode is the ingest and worker listeners' TLS: "off", "tls" or
	// "mtls" (node.TLS.IngestMode).
	tlsMode string
}

func printWelcome(w io.Writer, c welcome) {
	fmt.Fprintf(w, `
sluice is running: ingest API on %[1]s, %[3]s.
Development tenant "dev", API key: %[2]s
`, c.addr, c.key, c.mode)
	if c.consoleURL != "" {
		fmt.Fprintf(w, "Web console: %s (sign in with %s)\n", c.consoleURL, c.adminKeyFrom)
	}
	// The commands must speak the listeners' TLS, or they fail with an
	// error that names no flag.
	ctlTLS, grpcurlTLS := "", "-plaintext"
	switch c.tlsMode {
	case "tls":
		ctlTLS, grpcurlTLS = " --tls-ca <CA of --tls-cert>", "-cacert <CA of --tls-cert>"
	case "mtls":
		ctlTLS = " --tls-ca <CA of --tls-cert> --tls-cert <client cert> --tls-key <client key>"
		grpcurlTLS = "-cacert <CA of --tls-cert> -cert <client cert> -key <client key>"
	}
	if c.workerAddr != "" {
		fmt.Fprintf(w, `
Run a worker that prints each job (in another terminal):
  go run ./cmd/sluicectl worker --addr %[1]s --key-file %[2]s%[3]s
`, c.workerAddr, c.workerKeyFile, ctlTLS)
	}
	fmt.Fprintf(w, `
Submit a job (in another terminal):
  go run ./cmd/sluicectl submit --addr %[1]s --key %[2]s%[3]s 'hello, sluice'

or with grpcurl:
  grpcurl %[4]s -H 'authorization: Bearer %[2]s' -d '{"payload":"aGVsbG8="}' %[1]s sluice.ingest.v1.IngestService/Submit

`, c.addr, c.key, ctlTLS, grpcurlTLS)
}
