package ctl

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/drainer"
	"github.com/sluice-dev/sluice/internal/adminview"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/worker"
)

// jobLine is how the worker prints a job with --json.
type jobLine struct {
	Time          time.Time         `json:"time"`
	JobID         string            `json:"job_id"`
	Tenant        string            `json:"tenant"`
	Lane          string            `json:"lane"`
	Attempt       int               `json:"attempt"`
	EnqueuedAt    time.Time         `json:"enqueued_at"`
	Attributes    map[string]string `json:"attributes,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Outcome       string            `json:"outcome"` // ok, retry, fail or lease-timeout
}

func setupWorker(fs *flag.FlagSet) runFunc {
	envAddr, oldEnv := pullAddrEnv()
	addr := fs.String("addr", cmp.Or(envAddr, "127.0.0.1:7072"), "address of sluice's pull-worker listener, its --worker-listen (or SLUICE_PULL_ADDR)")
	key := fs.String("key", "", "worker key (or SLUICE_WORKER_KEY; default: the file --key-file)")
	keyFile := fs.String("key-file", "data/worker-key", "file holding the worker key (sluice writes its development key there)")
	concurrency := fs.Int("concurrency", 4, "most jobs run at once (the credits granted to sluice)")
	lanes := fs.String("lanes", "", "comma-separated lanes to serve (empty: every lane the key allows)")
	listen := fs.String("listen", "", "serve the push worker API on this address instead of pulling (give the gateway --worker-addr it)")
	forward := fs.String("forward", "", "pass each pulled job on to the push worker API (sluice.worker.v1.WorkerService) at this address and answer as it does: a bridge that lets a push worker be fed by pull")
	fail := fs.String("fail", "", "answer jobs whose payload matches this regular expression with a permanent error (they are dead-lettered at once)")
	retry := fs.String("retry", "", "answer jobs whose payload matches this regular expression with a retryable error (retried until --max-attempts, then dead-lettered)")
	jsonOut := fs.Bool("json", false, "print one JSON object per job instead of a line of text")
	work := flagconf.Duration(fs, "work", 0, "time each job takes before it is answered (to watch jobs held, or a worker killed mid-job)")
	var tlsc tlsflags.Client
	tlsc.Register(fs, "", "sluice (pull)")
	var tlsServer tlsflags.Server
	tlsServer.Register(fs, "listen-", "the push worker API (with --listen)")
	return func(ctx context.Context, e *env, args []string) error {
		if err := wantArgs(args, 0, "worker takes flags only"); err != nil {
			return err
		}
		failRE, err := compileOptional("--fail", *fail)
		if err != nil {
			return err
		}
		retryRE, err := compileOptional("--retry", *retry)
		if err != nil {
			return err
		}
		log, err := serve.NewLogger(e.stderr, "info")
		if err != nil {
			return err
		}
		p := &jobPrinter{w: e.stdout, json: *jsonOut}
		var next *drainer.GRPCWorker
		if *forward != "" {
			if *listen != "" {
				return errors.New("--forward bridges pulled jobs to a push worker; it does not go with --listen")
			}
			conn, err := grpc.NewClient(*forward, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return fmt.Errorf("--forward %s: %w", *forward, err)
			}
			defer conn.Close()
			next = drainer.NewGRPCWorker(conn)
		}
		handler := func(ctx context.Context, j worker.Job) error {
			if *work > 0 {
				select {
				case <-time.After(*work):
				case <-ctx.Done():
					if leaseTimedOut(ctx) {
						p.print(j, "lease-timeout")
					}
					return ctx.Err()
				}
			}
			var outcome string
			var err error
			switch {
			case failRE != nil && failRE.Match(j.Payload):
				outcome, err = "fail", worker.Permanent(fmt.Errorf("payload matches --fail %q", *fail))
			case retryRE != nil && retryRE.Match(j.Payload):
				outcome, err = "retry", fmt.Errorf("payload matches --retry %q (attempt %d)", *retry, j.Attempt)
			case next != nil:
				err = next.Handle(ctx, &j)
				switch {
				case err == nil:
					outcome = "ok"
				case leaseTimedOut(ctx):
					outcome = "lease-timeout"
				case worker.IsPermanent(err):
					outcome = "fail"
				default:
					outcome = "retry"
				}
			default:
				outcome = "ok"
			}
			p.print(j, outcome)
			return err
		}
		if *listen != "" {
			return servePush(ctx, log, *listen, tlsServer, handler)
		}
		if oldEnv && !given(fs, "addr") {
			log.WarnContext(ctx, "pulling from SLUICE_WORKER_ADDR, which the gateway and drainer read as --worker-addr (the push worker's address): set SLUICE_PULL_ADDR instead", slog.String("addr", *addr))
		}
		if *concurrency < 1 || *concurrency > 10000 {
			return fmt.Errorf("--concurrency %d: want 1 to 10000", *concurrency)
		}
		k := keyFromEnv(*key, "SLUICE_WORKER_KEY")
		if k == "" {
			b, err := os.ReadFile(*keyFile)
			if err != nil {
				return fmt.Errorf("no worker key: pass --key, set SLUICE_WORKER_KEY, or point --key-file at sluice's <data-dir>/worker-key (%w)", err)
			}
			k = strings.TrimSpace(string(b))
		}
		tlsCfg, err := tlsc.Config("")
		if err != nil {
			return err
		}
		opts := worker.ConnectOptions{Concurrency: *concurrency, TLS: tlsCfg, Logger: log}
		// Empty items ("std," or "std,,bulk") are ignored, as in the dlq
		// commands' lists: they were sent as a lane named "", which sluice
		// refused with `no lane ""` (found in review). A list of nothing
		// but commas is refused: it would serve every lane.
		opts.Lanes = splitList(*lanes)
		if *lanes != "" && len(opts.Lanes) == 0 {
			return fmt.Errorf("--lanes %q names no lane: give lane names separated by commas (--lanes std,bulk), or leave --lanes out to serve every lane the key allows", *lanes)
		}
		err = worker.Connect(ctx, *addr, k, handler, opts)
		log.InfoContext(context.WithoutCancel(ctx), "worker stopped")
		return err
	}
}

// leaseTimedOut reports whether a pulled job's handler ctx ended because
// the job's lease timed out. Such a job is printed with outcome
// lease-timeout (the worker package logs what to do about it): a --work
// longer than sluice's --worker-lease-timeout ended each attempt so, and
// nothing was printed while the job burned its attempts.
func leaseTimedOut(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), worker.ErrLeaseTimedOut)
}

// pullAddrEnv returns the pull-worker address set in the environment:
// SLUICE_PULL_ADDR, else SLUICE_WORKER_ADDR (old reports it), the name it
// had, which the gateway and drainer read as --worker-addr, the address
// they push jobs to: one name for two addresses (found in review).
func pullAddrEnv() (addr string, old bool) {
	if v := os.Getenv("SLUICE_PULL_ADDR"); v != "" {
		return v, false
	}
	v := os.Getenv("SLUICE_WORKER_ADDR")
	return v, v != ""
}

// given reports whether the flag name was set on the command line.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// servePush serves the push worker API (WorkerService) on listen.
func servePush(ctx context.Context, log *slog.Logger, listen string, tlsServer tlsflags.Server, handler worker.Handler) error {
	tlsCfg, err := tlsServer.Config("listen-", log)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", listen, err)
	}
	log.InfoContext(ctx, "worker listening", slog.String("addr", lis.Addr().String()), slog.Bool("tls", tlsCfg != nil))
	err = worker.Serve(ctx, lis, worker.Config{Handler: handler, TLS: tlsCfg, Logger: log, ShutdownGrace: 5 * time.Second})
	log.InfoContext(context.WithoutCancel(ctx), "worker stopped")
	return err
}

func compileOptional(name, expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("%s %q: not a regular expression: %w", name, expr, err)
	}
	return re, nil
}

// jobPrinter writes one line per job, whole lines only.
type jobPrinter struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

func (p *jobPrinter) print(j worker.Job, outcome string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		line := jobLine{
			Time: time.Now().UTC(), JobID: j.ID, Tenant: j.Tenant, Lane: j.Lane, Attempt: j.Attempt,
			EnqueuedAt: j.EnqueuedAt.UTC(), Attributes: j.Attributes, Outcome: outcome,
		}
		if utf8.Valid(j.Payload) {
			s := string(j.Payload)
			line.Payload = &s
		} else {
			line.PayloadBase64 = j.Payload
		}
		b, err := json.Marshal(line)
		if err != nil { // not reachable for these field types
			b = []byte(strconv.Quote(err.Error()))
		}
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	fmt.Fprintf(p.w, "%s %s job %s tenant=%s lane=%s attempt=%d", time.Now().UTC().Format(time.RFC3339), outcome, adminview.Printable(j.ID), adminview.Printable(j.Tenant), j.Lane, j.Attempt)
	for _, k := range sortedKeys(j.Attributes) {
		fmt.Fprintf(p.w, " %s=%s", adminview.Printable(k), strconv.Quote(j.Attributes[k]))
	}
	fmt.Fprintf(p.w, " payload=%s\n", strconv.Quote(string(j.Payload)))
}
