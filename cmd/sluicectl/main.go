// Command sluicectl submits jobs to a sluice gateway from the shell.
//
//	sluicectl submit --addr 127.0.0.1:7070 --key sk_dev_… [--attr k=v] [--idempotency-key K] [--ttl 1h] [--delay 10s] 'payload'
//
// Against a gateway serving TLS add --tls-ca ca.pem (or --tls for the
// system's roots), and --tls-cert/--tls-key where it requires client
// certificates.
//
// It prints the job id, or the gateway's error with its details (field
// violations, retry delay) and exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/cliconn"
	"github.com/sluice-dev/sluice/internal/tlsflags"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sluicectl:", err)
		}
		os.Exit(1)
	}
}

type attrs map[string]string

func (a attrs) String() string { return fmt.Sprint(map[string]string(a)) }
func (a attrs) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("%q: want key=value", v)
	}
	a[k] = val
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "submit" {
		fmt.Fprintln(stderr, "usage: sluicectl submit [flags] payload   (sluicectl submit -h for flags)")
		return errors.New("unknown or missing command")
	}
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:7070", "gateway address")
	key := fs.String("key", os.Getenv("SLUICE_API_KEY"), "API key (or SLUICE_API_KEY)")
	idem := fs.String("idempotency-key", "", "idempotency key")
	ttl := fs.Duration("ttl", 0, "time to live (0: none)")
	delay := fs.Duration("delay", 0, "delay before delivery")
	timeout := fs.Duration("timeout", 10*time.Second, "call timeout")
	var tlsc tlsflags.Client
	tlsc.Register(fs, "", "the gateway")
	a := attrs{}
	fs.Var(a, "attr", "attribute key=value (repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("give exactly one payload argument (quote it)")
	}
	if *key == "" {
		return errors.New("no API key: pass --key or set SLUICE_API_KEY (the gateway prints its development key at start)")
	}
	conn, err := cliconn.Dial(*addr, "--addr", *key, tlsc)
	if err != nil {
		return err
	}
	defer conn.Close()
	req := &ingestv1.SubmitRequest{Payload: []byte(fs.Arg(0)), Attributes: a, IdempotencyKey: *idem}
	if *ttl > 0 {
		req.Ttl = durationpb.New(*ttl)
	}
	if *delay > 0 {
		req.Delay = durationpb.New(*delay)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := ingestv1.NewIngestServiceClient(conn).Submit(ctx, req)
	if err != nil {
		return describe(err)
	}
	if resp.GetDuplicate() {
		fmt.Fprintf(stdout, "%s (duplicate of an earlier submit)\n", resp.GetJobId())
		return nil
	}
	fmt.Fprintln(stdout, resp.GetJobId())
	return nil
}

// describe renders a gRPC error with its details on one line each.
func describe(err error) error {
	st := status.Convert(err)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				fmt.Fprintf(&b, "\n  field %s: %s", v.GetField(), v.GetDescription())
			}
		case *errdetails.RetryInfo:
			fmt.Fprintf(&b, "\n  retry after %s", d.GetRetryDelay().AsDuration())
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				fmt.Fprintf(&b, "\n  quota %s", v.GetSubject())
			}
		}
	}
	return errors.New(b.String())
}
