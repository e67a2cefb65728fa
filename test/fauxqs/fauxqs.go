// Package fauxqs starts the local SQS-compatible server that tests use:
// the npm package fauxqs, pinned by package-lock.json in this directory,
// installed by ensure.sh and started by start.mjs on a loopback port.
//
// Tests that need it call Start from TestMain (one server per test binary)
// and Stop at the end. Start fails, with npm's or node's own output in the
// error, when node or npm is missing or the install fails: tests must not
// skip then.
package fauxqs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Region and account of the server; any credentials are accepted.
const (
	Region    = "us-east-1"
	AccountID = "000000000000"
)

// Server is a running fauxqs process.
type Server struct {
	// Endpoint is the server's base URL, http://127.0.0.1:PORT: the SDK's
	// BaseEndpoint. Queue URLs the server returns carry another host
	// (sqs.us-east-1.localhost) that must never be dialled.
	Endpoint string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of cmd.Wait, set before exited is closed
}

// Dir returns the directory holding package.json, ensure.sh and start.mjs.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// Start installs fauxqs if needed (ensure.sh), starts it on a free loopback
// port chosen by the kernel (node start.mjs 0, which prints the bound
// address), and waits until GET /health answers 200. Node's stderr goes to
// logw (nil discards it). ctx bounds the whole start; the process outlives
// ctx and is ended by Stop, or with the test binary.
func Start(ctx context.Context, logw io.Writer) (*Server, error) {
	return start(ctx, logw, "start.mjs", true)
}

// StartMoveTaskServer starts local-aws-sqs (start-movetask.mjs), the
// emulator that serves StartMessageMoveTask, which fauxqs lacks. It has no
// /health route; the ready line is its signal.
func StartMoveTaskServer(ctx context.Context, logw io.Writer) (*Server, error) {
	return start(ctx, logw, "start-movetask.mjs", false)
}

func start(ctx context.Context, logw io.Writer, script string, health bool) (*Server, error) {
	if logw == nil {
		logw = io.Discard
	}
	dir := Dir()
	if _, err := exec.LookPath("node"); err != nil {
		return nil, fmt.Errorf("fauxqs: node not found on PATH (Node.js >= 20 and npm are needed to run the local SQS server): %w", err)
	}
	ensure := exec.CommandContext(ctx, "bash", filepath.Join(dir, "ensure.sh"))
	ensure.Dir = dir
	var ensureOut bytes.Buffer
	ensure.Stdout, ensure.Stderr = &ensureOut, &ensureOut
	if err := ensure.Run(); err != nil {
		return nil, fmt.Errorf("fauxqs: %s/ensure.sh (npm ci) failed: %w\n%s", dir, err, ensureOut.String())
	}

	cmd := exec.Command("node", script, "0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FAUXQS_BIND=127.0.0.1")
	cmd.Stderr = logw
	// Ends the server if the test binary dies without calling Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("fauxqs: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fauxqs: start node: %w", err)
	}
	s := &Server{cmd: cmd, exited: make(chan struct{})}

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "fauxqs ready "); ok {
				select {
				case ready <- strings.TrimSpace(addr):
				default:
				}
			}
		}
		// Drained to EOF: the process has closed stdout, so Wait may run.
		s.err = cmd.Wait()
		close(s.exited)
	}()

	select {
	case addr := <-ready:
		s.Endpoint = addr
	case <-s.exited:
		return nil, fmt.Errorf("fauxqs: node %s exited before it was ready: %w (its stderr went to the test log)", script, s.err)
	case <-ctx.Done():
		_ = s.Stop()
		return nil, fmt.Errorf("fauxqs: waiting for the ready line: %w", ctx.Err())
	}
	if health {
		if err := s.waitHealthy(ctx); err != nil {
			_ = s.Stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) waitHealthy(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/health", nil)
		if err != nil {
			return fmt.Errorf("fauxqs: %w", err)
		}
		resp, err := client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-tick.C:
		case <-s.exited:
			return fmt.Errorf("fauxqs: exited before /health answered: %w", s.err)
		case <-ctx.Done():
			return fmt.Errorf("fauxqs: %s/health did not answer 200: %w (last: %w)", s.Endpoint, ctx.Err(), last)
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s) and waits for it.
// It is idempotent.
func (s *Server) Stop() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	var exitErr *exec.ExitError
	if s.err != nil && !errors.As(s.err, &exitErr) {
		return fmt.Errorf("fauxqs: %w", s.err)
	}
	return nil
}
