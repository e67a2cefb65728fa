// Command submit shows the Go client (package client): it submits one job,
// submits it again with the same idempotency key to show the duplicate,
// then submits a batch, and prints what happened.
//
// It finds the gateway and the key as `go run ./cmd/gateway` leaves them:
//
//	go run ./cmd/gateway              # terminal 1
//	go run ./examples/submit          # terminal 2, from the same directory
//
// Flags: --addr (SLUICE_ADDR, default 127.0.0.1:7070), --key
// (SLUICE_API_KEY; default: the development key in <data-dir>/dev-api-key),
// --data-dir (SLUICE_DATA_DIR, default data, the gateway's default),
// --batch N, --fail retry|permanent (an attribute examples/worker acts on),
// and for a gateway serving TLS --tls-ca (or --tls for the system's roots),
// with --tls-cert/--tls-key where it requires a client certificate.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "submit:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	addr := fs.String("addr", envOr("SLUICE_ADDR", "127.0.0.1:7070"), "gateway address")
	key := fs.String("key", os.Getenv("SLUICE_API_KEY"), "API key; empty reads <data-dir>/dev-api-key")
	dataDir := fs.String("data-dir", envOr("SLUICE_DATA_DIR", "data"), "the gateway's data directory, where it keeps the development key")
	batch := fs.Int("batch", 20, "jobs in the batch")
	fail := fs.String("fail", "", `set attribute fail=<value> on the first job: "retry" or "permanent" (see examples/worker)`)
	tlsOn := fs.Bool("tls", false, "connect over TLS, verifying the gateway with the system's roots (implied by --tls-ca, --tls-cert)")
	tlsCA := fs.String("tls-ca", "", "PEM CA bundle to verify the gateway's certificate with")
	tlsCert := fs.String("tls-cert", "", "PEM client certificate, for a gateway that requires one")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := client.Config{Insecure: true} // the gateway's default: plain text on loopback
	if *tlsOn || *tlsCA != "" || *tlsCert != "" || *tlsKey != "" {
		tc, err := client.LoadTLS(*tlsCA, *tlsCert, *tlsKey)
		if err != nil {
			return err
		}
		cfg = client.Config{TLS: tc}
	}
	keySource := "--key"
	if *key == "" {
		path := filepath.Join(*dataDir, "dev-api-key")
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("no API key: pass --key, set SLUICE_API_KEY, or start `go run ./cmd/gateway` in this directory so that it writes %s (%w)", path, err)
		}
		*key, keySource = strings.TrimSpace(string(b)), path
	}
	fmt.Fprintf(out, "gateway %s (tls %t), API key from %s\n", *addr, cfg.TLS != nil, keySource)

	cfg.APIKey = *key
	c, err := client.New(*addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	job := client.Job{
		Payload:        []byte("hello from examples/submit"),
		Attributes:     map[string]string{"source": "examples/submit"},
		IdempotencyKey: client.NewIdempotencyKey(), // ours, so that we can repeat it below
	}
	if *fail != "" {
		job.Attributes["fail"] = *fail
	}
	res, err := c.Submit(ctx, job)
	if err != nil {
		return explain(err)
	}
	fmt.Fprintf(out, "submitted job %s (idempotency key %s, %d attempt(s))\n", res.JobID, res.IdempotencyKey, res.Attempts)

	again, err := c.Submit(ctx, job)
	if err != nil {
		return explain(err)
	}
	fmt.Fprintf(out, "submitted it again with the same key: job %s, duplicate=%t\n", again.JobID, again.Duplicate)

	if *batch <= 0 {
		return nil
	}
	jobs := make([]client.Job, *batch)
	for i := range jobs {
		jobs[i] = client.Job{Payload: fmt.Appendf(nil, "batch job %d", i), Attributes: map[string]string{"source": "examples/submit"}}
	}
	results, err := c.SubmitBatch(ctx, jobs)
	accepted, retried, shown := 0, 0, 0
	for i, r := range results {
		if r.Attempts > 1 {
			retried++
		}
		if r.Err != nil {
			if shown++; shown <= 5 {
				fmt.Fprintf(out, "  batch job %d not accepted after %d attempt(s): %v\n", i, r.Attempts, explain(r.Err))
			}
			continue
		}
		accepted++
	}
	fmt.Fprintf(out, "batch of %d jobs: %d accepted, %d of them after a retry (e.g. over the tenant's rate)\n", len(jobs), accepted, retried)
	// Some jobs not accepted is a failure of the run too: it exited 0
	// with a few hundred of 3,000 jobs refused across a gateway restart
	// (found in a walkthrough).
	if accepted < len(jobs) {
		return fmt.Errorf("%d of %d batch jobs not accepted (the first are listed above)", len(jobs)-accepted, len(jobs))
	}
	return err
}

// explain says what a refusal means for the caller, using the client's
// typed errors.
func explain(err error) error {
	var (
		quota   *client.QuotaError
		backlog *client.BacklogError
		invalid *client.InvalidArgumentError
	)
	switch {
	case errors.As(err, &quota):
		return fmt.Errorf("over the tenant's submit rate; try again in %s: %w", quota.RetryAfter, err)
	case errors.As(err, &backlog):
		return fmt.Errorf("lane %s has %d jobs waiting, the limit for this tier; try again in %s: %w", backlog.Lane, backlog.Backlog, backlog.RetryAfter, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("the job was refused as invalid (%d field(s)): %w", len(invalid.Violations), err)
	}
	return err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
