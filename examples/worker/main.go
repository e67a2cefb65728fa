// Command worker shows the worker helper (package worker): it pulls jobs
// from sluice (worker.Connect) and prints each one.
//
//	go run ./cmd/gateway                                     # terminal 1
//	go run ./examples/worker                                 # terminal 2
//	go run ./examples/submit --fail retry                    # terminal 3
//
// A job with attribute fail=retry asks for a second attempt 2 s later;
// fail=permanent sends it to the dead-letter queue. Ctrl-C stops the
// worker gracefully: it asks for no more jobs, and the jobs in progress
// finish and are acked first.
//
// Flags: --addr (SLUICE_PULL_ADDR, default 127.0.0.1:7072, the gateway's
// --worker-listen), --key (SLUICE_WORKER_KEY; default: the development key
// in --data-dir's worker-key), --concurrency, and for a --worker-listen
// that serves TLS --tls-ca (the CA of sluice's certificate) with, for
// mutual TLS, --tls-cert and --tls-key. With --listen ADDR
// (SLUICE_PUSH_LISTEN) it serves sluice.worker.v1.WorkerService for the
// gateway's --worker-addr instead (push), with --tls-cert and --tls-key to
// serve TLS, plus --tls-client-ca to require the drainers' client
// certificates (the gateway's --worker-tls-* flags). The old names of the
// two variables, SLUICE_WORKER_ADDR and SLUICE_WORKER_LISTEN, are read
// with a warning when the new ones are unset: the gateway reads them as
// its --worker-addr and --worker-listen, each the other address.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	envAddr, oldAddr := envNewOrOld("SLUICE_PULL_ADDR", "SLUICE_WORKER_ADDR")
	addr := fs.String("addr", cmp.Or(envAddr, "127.0.0.1:7072"), "sluice's pull-worker address (the gateway's --worker-listen)")
	key := fs.String("key", os.Getenv("SLUICE_WORKER_KEY"), "worker key (default: <data-dir>/worker-key)")
	dataDir := fs.String("data-dir", envOr("SLUICE_DATA_DIR", "data"), "the gateway's data directory, where its development worker key is")
	concurrency := fs.Int("concurrency", 8, "most jobs run at once")
	envListen, oldListen := envNewOrOld("SLUICE_PUSH_LISTEN", "SLUICE_WORKER_LISTEN")
	listen := fs.String("listen", envListen, "serve the push worker API on this address instead of pulling (give the gateway --worker-addr it)")
	tlsCA := fs.String("tls-ca", "", "pulling: PEM CA bundle that signed sluice's --tls-cert; pulls over TLS (empty and no --tls-cert: plain text)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate: with --listen, to serve TLS with; pulling, the client certificate for mutual TLS")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "with --listen: PEM CA bundle; require drainers to present a certificate it signed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := log.New(out, "", log.Ltime)
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if oldListen != "" && !given["listen"] {
		logger.Printf("warning: %s is the gateway's pull-worker listener (--worker-listen), read here as --listen for now: set SLUICE_PUSH_LISTEN instead", oldListen)
	}
	if *listen == "" {
		if oldAddr != "" && !given["addr"] {
			logger.Printf("warning: %s is the gateway's push worker address (--worker-addr), read here as --addr for now: set SLUICE_PULL_ADDR instead", oldAddr)
		}
		k := *key
		if k == "" {
			b, err := os.ReadFile(filepath.Join(*dataDir, "worker-key"))
			if err != nil {
				return fmt.Errorf("no worker key: pass --key, or run the gateway first (it writes %s): %w", filepath.Join(*dataDir, "worker-key"), err)
			}
			k = strings.TrimSpace(string(b))
		}
		opts := worker.ConnectOptions{
			Concurrency: *concurrency,
			// Warnings show why no job comes: a refused key, a TLS
			// mismatch, sluice not there (they were discarded, and a
			// worker that could not connect said nothing).
			Logger:    slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn})),
			OnSession: func(id string) { logger.Printf("connected (session %s)", id) },
		}
		switch {
		case *tlsClientCA != "":
			return errors.New("--tls-client-ca is for --listen (push); pulling, give --tls-ca, and --tls-cert and --tls-key for mutual TLS")
		case *tlsCA != "" || *tlsCert != "" || *tlsKey != "":
			tc, err := client.LoadTLS(*tlsCA, *tlsCert, *tlsKey)
			if err != nil {
				return err
			}
			opts.TLS = tc
		}
		logger.Printf("pulling jobs from %s, %d at a time (tls %t)", *addr, *concurrency, opts.TLS != nil)
		err := worker.Connect(ctx, *addr, k, handler(logger), opts)
		logger.Print("worker stopped")
		return err
	}
	if *tlsCA != "" {
		return errors.New("--tls-ca is for pulling; with --listen give --tls-cert and --tls-key to serve TLS, and --tls-client-ca to require drainers' certificates")
	}
	cfg := worker.Config{Handler: handler(logger)}
	if *tlsCert != "" || *tlsKey != "" || *tlsClientCA != "" {
		tc, err := worker.LoadTLS(*tlsCert, *tlsKey, *tlsClientCA)
		if err != nil {
			return err
		}
		cfg.TLS = tc
	}
	logger.Printf("worker listening on %s (tls %t); start the gateway with: go run ./cmd/gateway --worker-addr %s", *listen, cfg.TLS != nil, *listen)
	err := worker.ListenAndServe(ctx, *listen, cfg)
	logger.Print("worker stopped")
	return err
}

// handler prints each job and acts on its "fail" attribute.
func handler(logger *log.Logger) worker.Handler {
	return func(ctx context.Context, job worker.Job) error {
		logger.Printf("job %s tenant=%s lane=%s attempt=%d enqueued %s ago: %q %v",
			job.ID, job.Tenant, job.Lane, job.Attempt, time.Since(job.EnqueuedAt).Round(time.Millisecond), job.Payload, job.Attributes)
		switch job.Attributes["fail"] {
		case "retry":
			if job.Attempt == 1 {
				logger.Printf("  → asking for a retry in 2s")
				return worker.RetryAfter(errors.New("not ready on the first attempt"), 2*time.Second)
			}
		case "permanent":
			logger.Printf("  → permanent failure: the job goes to the dead-letter queue")
			return worker.Permanent(errors.New("this job can never succeed"))
		}
		return nil
	}
}

// envNewOrOld returns the variable name's value, else old's; oldUsed is
// old when its value was returned. The old names, SLUICE_WORKER_ADDR
// and SLUICE_WORKER_LISTEN, are the gateway's --worker-addr and
// --worker-listen, each the other address of the two.
func envNewOrOld(name, old string) (v, oldUsed string) {
	if v := os.Getenv(name); v != "" {
		return v, ""
	}
	if v := os.Getenv(old); v != "" {
		return v, old
	}
	return "", ""
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
