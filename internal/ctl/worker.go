package ctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

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
	Outcome       string            `json:"outcome"` // ok, retry or fail
}

func setupWorker(fs *flag.FlagSet) runFunc {
	listen := fs.String("listen", "127.0.0.1:7072", "address to serve the worker API on (give the gateway --worker-addr this)")
	fail := fs.String("fail", "", "answer jobs whose payload matches this regular expression with a permanent error (they are dead-lettered at once)")
	retry := fs.String("retry", "", "answer jobs whose payload matches this regular expression with a retryable error (retried until --max-attempts, then dead-lettered)")
	jsonOut := fs.Bool("json", false, "print one JSON object per job instead of a line of text")
	var tlsServer tlsflags.Server
	tlsServer.Register(fs, "", "the worker API")
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
		tlsCfg, err := tlsServer.Config("")
		if err != nil {
			return err
		}
		log, err := serve.NewLogger(e.stderr, "info")
		if err != nil {
			return err
		}
		lis, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("--listen %s: %w", *listen, err)
		}
		p := &jobPrinter{w: e.stdout, json: *jsonOut}
		handler := func(_ context.Context, j worker.Job) error {
			var outcome string
			var err error
			switch {
			case failRE != nil && failRE.Match(j.Payload):
				outcome, err = "fail", worker.Permanent(fmt.Errorf("payload matches --fail %q", *fail))
			case retryRE != nil && retryRE.Match(j.Payload):
				outcome, err = "retry", fmt.Errorf("payload matches --retry %q (attempt %d)", *retry, j.Attempt)
			default:
				outcome = "ok"
			}
			p.print(j, outcome)
			return err
		}
		log.InfoContext(ctx, "worker listening", slog.String("addr", lis.Addr().String()), slog.Bool("tls", tlsCfg != nil))
		err = worker.Serve(ctx, lis, worker.Config{Handler: handler, TLS: tlsCfg, Logger: log, ShutdownGrace: 5 * time.Second})
		log.InfoContext(context.WithoutCancel(ctx), "worker stopped")
		return err
	}
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
	fmt.Fprintf(p.w, "%s %s job %s tenant=%s lane=%s attempt=%d", time.Now().UTC().Format(time.RFC3339), outcome, printable(j.ID), printable(j.Tenant), j.Lane, j.Attempt)
	for _, k := range sortedKeys(j.Attributes) {
		fmt.Fprintf(p.w, " %s=%s", printable(k), strconv.Quote(j.Attributes[k]))
	}
	fmt.Fprintf(p.w, " payload=%s\n", strconv.Quote(string(j.Payload)))
}
