// Package e2e tests the real binaries: it builds cmd/gateway once, starts
// it on loopback ports with a data directory of its own, talks to it
// through gRPC like any client, and receives deliveries on a real gRPC
// worker served by the test.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	build := exec.Command("go", "build", "-race", "-o", dir+"/", "../cmd/gateway", "../cmd/drainer", "../cmd/sluicectl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.Exit(1)
	}
	// The SQS tests talk to a local server only; any credentials do.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"} {
		os.Setenv(k, v)
	}
	code := m.Run()
	if faux != nil {
		_ = faux.Stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running binary whose JSON log lines are collected.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs []map[string]any
	done chan struct{}
	err  error
}

// start runs bin with args and waits for the log line with msg "gateway
// listening" or "admin API listening" as asked by waitFor.
func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Stdout = io.Discard
	return startCmd(t, bin, cmd)
}

// startCmd is start for a command already set up (its stdout taken).
func startCmd(t *testing.T, bin string, cmd *exec.Cmd) *proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				line = map[string]any{"msg": "(not json) " + sc.Text()}
			}
			p.mu.Lock()
			p.logs = append(p.logs, line)
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			p.mu.Lock()
			for _, l := range p.logs {
				t.Logf("%s log: %v", bin, l)
			}
			p.mu.Unlock()
		}
	})
	return p
}

// waitLog waits for a log line with the given msg and returns it.
func (p *proc) waitLog(msg string) map[string]any {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, l := range p.logs {
			if l["msg"] == msg {
				p.mu.Unlock()
				return l
			}
		}
		p.mu.Unlock()
		select {
		case <-p.done:
			p.t.Fatalf("process exited (%v) before logging %q", p.err, msg)
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.t.Fatalf("no %q log line within 60s", msg)
	return nil
}

func (p *proc) addr(msg string) string {
	return p.waitLog(msg)["addr"].(string)
}

// stop sends sig and waits for the process to exit, returning its error.
func (p *proc) stop(sig syscall.Signal) error {
	p.t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(60 * time.Second):
		p.t.Fatal("process did not exit within 60s")
		return nil
	}
}

// worker is a real gRPC worker that records the jobs it processes.
type worker struct {
	workerv1.UnimplementedWorkerServiceServer
	addr string

	mu   sync.Mutex
	jobs map[string]*workerv1.ProcessRequest
	seen chan struct{}
}

func startWorker(t *testing.T) *worker {
	t.Helper()
	w := &worker{jobs: map[string]*workerv1.ProcessRequest{}, seen: make(chan struct{}, 1)}
	w.addr = startWorkerWith(t, w)
	return w
}

// startWorkerWith serves impl as a worker on a loopback port and returns
// its address.
func startWorkerWith(t *testing.T, impl workerv1.WorkerServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	workerv1.RegisterWorkerServiceServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func (w *worker) Process(_ context.Context, req *workerv1.ProcessRequest) (*workerv1.ProcessResponse, error) {
	w.mu.Lock()
	w.jobs[req.GetJobId()] = req
	w.mu.Unlock()
	select {
	case w.seen <- struct{}{}:
	default:
	}
	return &workerv1.ProcessResponse{}, nil
}

// waitFor waits until every id has been processed.
func (w *worker) waitFor(t *testing.T, ids []string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		w.mu.Lock()
		missing := 0
		for _, id := range ids {
			if w.jobs[id] == nil {
				missing++
			}
		}
		w.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-w.seen:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d jobs not delivered within 60s", missing, len(ids))
		}
	}
}

func (w *worker) job(id string) *workerv1.ProcessRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.jobs[id]
}

// client dials the gateway and returns a client and a ctx factory per key.
func client(t *testing.T, addr string) ingestv1.IngestServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ingestv1.NewIngestServiceClient(conn)
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

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
			t.Fatalf("/metrics of %s lacks %q", p.cmd.Path, missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
