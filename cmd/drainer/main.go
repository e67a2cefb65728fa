// Command drainer runs sluice's drainers and their admin API without the
// gateway. Its former operator commands (stats, limits, dlq …) are
// aliases for sluicectl's. With --backend sqs it is
// the drain fleet: run as many as the load needs. On the embedded backend
// it drains a data directory that no gateway holds (the store allows one
// process).
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
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/node"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/tenant"
)

func main() {
	var hup <-chan os.Signal
	if runs(os.Args[1:]) {
		// First: a SIGHUP during start-up is a reload, not the end. The
		// operator commands keep SIGHUP's default (a closed terminal
		// ends them).
		hup = node.NotifyHUP()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown; a second one ends the
	// process at once (it was swallowed until the shutdown ended).
	context.AfterFunc(ctx, stop)
	err := dispatch(ctx, os.Args[1:], hup, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "drainer:", err)
		os.Exit(1)
	}
}

// runs reports whether args run the drainer, not an operator command.
func runs(args []string) bool {
	return len(args) == 0 || strings.HasPrefix(args[0], "-") || args[0] == "run"
}

// dispatch runs the drainer, its tenant file reloaded on each value from
// hup (node.NotifyHUP), or an operator command over its admin API.
func dispatch(ctx context.Context, args []string, hup <-chan os.Signal, stdout, stderr io.Writer) error {
	if runs(args) {
		if len(args) > 0 && args[0] == "run" {
			args = args[1:]
		}
		return run(ctx, args, hup, stderr)
	}
	switch args[0] {
	case "stats", "limits", "dlq", "top":
		return alias(ctx, args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, cliUsage)
		return nil
	}
	fmt.Fprint(stderr, cliUsage)
	return fmt.Errorf("unknown command %q", args[0])
}

// run runs the drainers until ctx ends; hup's values reload the tenant
// file. ctx ending during start-up is a stop, not an error.
func run(ctx context.Context, args []string, hup <-chan os.Signal, stderr io.Writer) (err error) {
	defer func() { err = node.Stopped(ctx, err) }()
	fs := flag.NewFlagSet("drainer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = flagconf.Usage(fs)
	var bf node.BackendFlags
	bf.Register(fs)
	queues := fs.String("queues", "", "queue topology file (YAML); empty uses lanes premium, standard, free")
	tenantsFile := fs.String("tenants", "", "tenant config file, for per-tenant drain limits; empty gives every tenant the standard tier's")
	var target node.Target
	target.Register(fs)
	var pullFlags node.PullFlags
	pullFlags.Register(fs)
	concurrency := fs.Int("concurrency", 0, node.ConcurrencyUsage)
	adminListen := fs.String("admin-listen", "127.0.0.1:7071", "address of the admin gRPC API")
	adminKey := fs.String("admin-key", "", "admin API key; empty uses (and creates) <data-dir>/admin-key")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	grace := flagconf.Duration(fs, "shutdown-grace", 30*time.Second, "how long SIGTERM waits for deliveries in flight")
	var observe node.ObserveFlags
	observe.Register(fs, "127.0.0.1:9091")
	var tlsFlags node.TLSFlags
	tlsFlags.Register(fs)
	var consoleFlags node.ConsoleFlags
	consoleFlags.Register(fs)
	var policy sideliner.Policy
	var share, readAhead int
	node.PolicyFlags(fs, &policy, &share, &readAhead)
	fs.String("config", "", "YAML file of settings (keys are flag names)")
	if err := flagconf.Parse(fs, args, "SLUICE", "config"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *concurrency < 0 {
		return fmt.Errorf("--concurrency %d: must be at least 1 (or 0 for the default)", *concurrency)
	}
	if *grace <= 0 {
		return fmt.Errorf("--shutdown-grace %s: must be positive, such as 30s (deliveries in flight need time to end)", *grace)
	}
	if err := errors.Join(consoleFlags.Validate(), observe.Validate(), pullFlags.Validate(), node.CheckPolicyFlags(policy, share, readAhead), target.Validate(), node.CheckHandlerTimeout(bf.Kind, target), node.CheckPushTarget(target, pullFlags), tlsFlags.CheckWorkerTLS(target)); err != nil {
		return err
	}
	if err := policy.Validate(); err != nil { // what the flags' own checks missed
		return err
	}
	*concurrency = target.Concurrency(*concurrency)
	log, err := serve.NewLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	for _, w := range flagconf.StrayEnv(fs, "SLUICE", os.Environ()) {
		log.Warn(w)
	}
	topo, err := node.LoadTopology(*queues, log)
	if err != nil {
		return err
	}
	backend, err := node.OpenBackend(ctx, bf, topo, log)
	if err != nil {
		return err
	}
	defer node.CloseBackend(backend, log)
	topo = node.WithRetiredShards(ctx, backend, topo, log)
	key, err := node.AdminKey(*adminKey, bf.DataDir)
	if err != nil {
		return err
	}
	noTenants, err := tenant.Parse([]byte("{}"))
	if err != nil {
		return err
	}
	roKey, err := consoleFlags.ReadOnlyKey()
	if err != nil {
		return err
	}
	tenants, err := node.OpenTenants(*tenantsFile, topo, noTenants,
		node.ReservedKey{Name: "the admin key", Key: key}, node.ReservedKey{Name: "the console's read-only key", Key: roKey})
	if err != nil {
		return err
	}
	obs, err := node.StartObserver(ctx, observe, backend, topo, log)
	if err != nil {
		return err
	}
	defer node.StopOnExit(obs, 10*time.Second, log)
	node.WatchTenants(ctx, tenants, hup, obs.Metrics, log)
	if observe.MetricsListen != "" || observe.CloudWatchNamespace != "" {
		// Export queue depths too; a slow refresh keeps the cost low
		// (each read is a billed call per queue on SQS).
		depths := depth.New(depth.Config{Backend: backend, Queues: topo.Names(), Interval: time.Minute, Logger: log, Observe: obs.ObserveDepth})
		if err := depths.Start(ctx); err != nil {
			return fmt.Errorf("read queue depths: %w", err)
		}
		defer node.StopOnExit(depths, 10*time.Second, log)
	}
	tlsCfg, err := tlsFlags.Resolve(log)
	if err != nil {
		return err
	}
	target.WorkerDial = tlsCfg.Worker
	handler, closeHandler, err := node.Handler(target, log)
	if err != nil {
		return err
	}
	defer func() { _ = closeHandler() }()
	consoleHook, err := consoleFlags.ConsoleHook(key, len(tlsCfg.Admin) > 0, log, nil)
	if err != nil {
		return err
	}
	workerKey := ""
	if handler == nil {
		if workerKey, err = node.SecretFile(node.WorkerKeyFile(bf.DataDir), "sk_worker_"); err != nil {
			return err
		}
	}
	return node.RunDrain(ctx, node.DrainConfig{
		Pull: pullFlags, WorkerKeys: node.WorkerKeys(tenants, workerKey), WorkerTLS: tlsCfg.Ingest, WorkerTLSMode: tlsCfg.IngestMode,
		Backend: backend, Topology: topo, Handler: handler, HandlerTimeout: target.HandlerTimeout, Concurrency: *concurrency,
		Tenants: tenants, Policy: policy, SidelineShare: share, ReadAhead: readAhead, ReceiveLinger: bf.DrainReceiveLinger(), Metrics: obs.Metrics,
		AdminListen: *adminListen, AdminKey: key, ShutdownGrace: *grace, Logger: log,
		AdminTLS: tlsCfg.Admin, AdminTLSMode: tlsCfg.AdminMode, Console: consoleHook,
	})
}
