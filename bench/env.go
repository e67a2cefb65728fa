package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/test/fauxqs"
)

// Env is one harness run: the binaries it built, its scratch directory,
// the processes it started and, when a scenario needs it, the local
// SQS-compatible server.
type Env struct {
	// Root is the repository root (holds go.mod).
	Root string
	// Work is the scratch directory: data dirs, configs, process logs.
	Work string
	// BareCmd runs the bare grpc-go ingest server (see ServeBare): the
	// harness binary itself with its bare-server argument.
	BareCmd []string
	// Out receives progress lines and every figure as it is measured.
	Out io.Writer

	bin string

	mu    sync.Mutex
	procs []*Proc
	seq   int
	sqs   *fauxqs.Server
}

// NewEnv builds cmd/gateway and cmd/drainer (without -race) into work.
func NewEnv(ctx context.Context, root, work string, bareCmd []string, out io.Writer) (*Env, error) {
	e := &Env{Root: root, Work: work, BareCmd: bareCmd, Out: out, bin: filepath.Join(work, "bin")}
	if err := os.MkdirAll(e.bin, 0o750); err != nil {
		return nil, fmt.Errorf("scratch directory: %w", err)
	}
	start := time.Now()
	if err := testcluster.Build(ctx, e.bin, false, "gateway", "drainer"); err != nil {
		return nil, err
	}
	e.Logf("built cmd/gateway and cmd/drainer in %.1fs", time.Since(start).Seconds())
	// The SQS backend talks to the local server only; any credentials do.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": fauxqs.Region} {
		os.Setenv(k, v)
	}
	return e, nil
}

// Logf prints a progress line.
func (e *Env) Logf(format string, args ...any) {
	fmt.Fprintf(e.Out, format+"\n", args...)
}

// Dir returns a new directory under the scratch directory.
func (e *Env) Dir(name string) (string, error) {
	e.mu.Lock()
	e.seq++
	n := e.seq
	e.mu.Unlock()
	d := filepath.Join(e.Work, fmt.Sprintf("%02d-%s", n, name))
	if err := os.MkdirAll(d, 0o750); err != nil {
		return "", fmt.Errorf("scratch directory: %w", err)
	}
	return d, nil
}

// Proc is a running sluice binary.
type Proc = testcluster.Proc

// Start runs one of the built binaries (gateway, drainer) or, given an
// absolute path, any program, logging to dir/<name>.log.
func (e *Env) Start(dir, name, bin string, args ...string) (*Proc, error) {
	if !filepath.IsAbs(bin) {
		bin = filepath.Join(e.bin, bin)
	}
	e.mu.Lock()
	e.seq++
	n := e.seq
	e.mu.Unlock()
	p, err := testcluster.Start(testcluster.Spec{Name: name, Path: bin, Args: args, LogPath: filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, n))})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

// SQSEndpoint starts the local SQS-compatible server on first use
// (installing it with test/fauxqs/ensure.sh if needed) and returns its
// endpoint.
func (e *Env) SQSEndpoint(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sqs == nil {
		s, err := fauxqs.Start(ctx, nil)
		if err != nil {
			return "", fmt.Errorf("local SQS server: %w", err)
		}
		e.sqs = s
	}
	return e.sqs.Endpoint, nil
}

// ResetSQS stops the local SQS server, so the next SQSEndpoint starts a
// fresh one: queues of finished scenarios would otherwise slow it.
func (e *Env) ResetSQS() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sqs != nil {
		_ = e.sqs.Stop()
		e.sqs = nil
	}
}

// Close kills every process still running and stops the SQS server.
func (e *Env) Close() {
	e.mu.Lock()
	procs := e.procs
	e.procs = nil
	e.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	e.ResetSQS()
}

// FindRoot walks up from dir to the directory holding sluice's go.mod.
func FindRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/sluice-dev/sluice\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no sluice go.mod in %s or above: run from the repository", dir)
		}
	}
}
