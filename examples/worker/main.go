// Command worker shows the worker helper (package worker): it serves
// sluice.worker.v1.WorkerService and prints each job a drainer delivers.
//
//	go run ./examples/worker                                 # terminal 1
//	go run ./cmd/gateway --worker-addr 127.0.0.1:7080        # terminal 2
//	go run ./examples/submit --fail retry                    # terminal 3
//
// A job with attribute fail=retry asks for a second attempt 2 s later;
// fail=permanent sends it to the dead-letter queue. Ctrl-C stops the
// worker gracefully: jobs in progress finish first.
//
// Flags: --listen (SLUICE_WORKER_LISTEN, default 127.0.0.1:7080); to serve
// TLS, --tls-cert and --tls-key, plus --tls-client-ca to require the
// drainers' client certificates (the gateway's --worker-tls-* flags).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

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
	listen := fs.String("listen", envOr("SLUICE_WORKER_LISTEN", "127.0.0.1:7080"), "address to serve the worker API on")
	tlsCert := fs.String("tls-cert", "", "PEM certificate to serve TLS with; empty serves plain text")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "PEM CA bundle: require drainers to present a certificate it signed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := log.New(out, "", log.Ltime)
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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
