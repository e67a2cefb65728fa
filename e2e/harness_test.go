// Package e2e tests the real binaries: it builds cmd/gateway once, starts
// it on loopback ports with a data directory of its own, talks to it
// through gRPC like any client, and receives deliveries on a real gRPC
// worker served by the test.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/internal/tlsflags"
)

// env holds the binaries, built once with the race detector, and starts
// the local SQS-compatible server for the first cluster on SQS.
var env *testcluster.Env

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = &testcluster.Env{Bin: filepath.Join(dir, "bin"), Work: dir, SQSLog: os.Stderr}
	if err := testcluster.Build(context.Background(), env.Bin, true, "gateway", "drainer", "sluicectl"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.StopSQS()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running binary whose JSON log lines are collected; it fails
// its test where the harness's calls return errors.
type proc struct {
	*testcluster.Proc
	t *testing.T
}

// start runs one of the built binaries with args (and the environment
// of a process talking to the local SQS-compatible server).
func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	if (bin == "gateway" || (bin == "drainer" && slices.Contains(args, "run"))) && !slices.Contains(args, "--worker-listen") {
		// Pull workers' listener: a free port, as for the others, so
		// that tests can run side by side.
		args = append(args, "--worker-listen", "127.0.0.1:0")
	}
	return startSpec(t, testcluster.Spec{Name: bin, Path: filepath.Join(env.Bin, bin), Args: args, Env: testcluster.SQSEnv})
}

// startSpec starts a process and kills it when the test ends, logging its
// lines if the test failed.
func startSpec(t *testing.T, spec testcluster.Spec) *proc {
	t.Helper()
	p, err := testcluster.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			for _, l := range p.Lines() {
				t.Logf("%s log: %v", spec.Name, l)
			}
		}
	})
	return &proc{Proc: p, t: t}
}

// waitLog waits for a log line with the given msg and returns it.
func (p *proc) waitLog(msg string) map[string]any {
	p.t.Helper()
	return p.waitLogN(msg, 1)
}

// waitLogN waits until the process has logged msg n times and returns the
// n-th line.
func (p *proc) waitLogN(msg string, n int) map[string]any {
	p.t.Helper()
	l, err := p.WaitLogN(p.t.Context(), msg, n, time.Minute)
	if err != nil {
		p.t.Fatal(err)
	}
	return l
}

func (p *proc) addr(msg string) string {
	return p.waitLog(msg)["addr"].(string)
}

// startCluster starts a cluster of the built binaries, named after the
// test, and stops it when the test ends, logging its processes' lines if
// the test failed.
func startCluster(t *testing.T, cfg testcluster.ClusterConfig) *testcluster.Cluster {
	t.Helper()
	cfg.Name = strings.ReplaceAll(t.Name(), "/", "-")
	c, err := env.NewCluster(t.Context(), cfg)
	if err == nil {
		t.Cleanup(func() {
			_ = c.Close()
			for _, name := range c.Roles() {
				if p := c.Proc(name); p != nil && t.Failed() {
					t.Logf("%s log:\n%s", name, p.Tail(1000))
				}
			}
		})
		err = c.Start(t.Context())
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// role returns the process running a role of c.
func role(t *testing.T, c *testcluster.Cluster, name string) *proc { return &proc{c.Proc(name), t} }

// stop sends sig and waits for the process to exit, returning its error.
func (p *proc) stop(sig syscall.Signal) error {
	p.t.Helper()
	_ = p.Signal(sig)
	select {
	case <-p.Done():
		return p.Err()
	case <-time.After(60 * time.Second):
		p.t.Fatal("process did not exit within 60s")
		return nil
	}
}

// worker is a real gRPC worker that records the jobs it processes.
type worker struct{ *testcluster.Worker }

// startWorker serves a worker that acknowledges every job, with the
// server options given, until the test ends.
func startWorker(t *testing.T, opts ...grpc.ServerOption) *worker {
	t.Helper()
	return startAnsweringWorker(t, nil, opts...)
}

// startAnsweringWorker is startWorker with a worker that answers each call
// as answer says (see testcluster.Answer).
func startAnsweringWorker(t *testing.T, answer testcluster.Answer, opts ...grpc.ServerOption) *worker {
	t.Helper()
	w, err := testcluster.StartWorker(answer, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &worker{w}
}

// serveGRPC serves what register registers on a loopback port until the
// test ends, and returns its address.
func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// waitFor waits until every id has been processed.
func (w *worker) waitFor(t *testing.T, ids []string) {
	t.Helper()
	if err := w.WaitDelivered(t.Context(), ids, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// eventually checks done every interval until it holds, and fails the
// test with the message if it does not within timeout.
func eventually(t *testing.T, timeout, interval time.Duration, done func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(interval)
	}
}

// dial connects to addr with the client TLS setting c.
func dial(t *testing.T, addr string, c tlsflags.Client) *grpc.ClientConn {
	t.Helper()
	opt, err := c.DialOption("")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// client connects to a gateway's ingest API in plaintext.
func client(t *testing.T, addr string) ingestv1.IngestServiceClient {
	t.Helper()
	return ingestv1.NewIngestServiceClient(dial(t, addr, tlsflags.Client{}))
}

var withKey = testcluster.WithKey

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.TrimLeft(content, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// scrape fetches a process's /metrics page (its address is logged at
// start) and checks that each want substring is on it.
func scrape(t *testing.T, p *proc, want ...string) {
	t.Helper()
	addr := p.addr("metrics listening")
	var page string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			page = string(b)
		}
		missing := ""
		for _, w := range want {
			if !strings.Contains(page, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics of %s lacks %q", p.Spec.Name, missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
