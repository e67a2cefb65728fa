// Package testcluster is the harness the end-to-end tests (e2e/), the
// reliability harness (reliability/) and the benchmarks (bench/) share:
// it builds the sluice binaries, starts them as real processes whose JSON
// logs it reads, hands out loopback ports, runs them as clusters (a
// gateway and drainers on the embedded backend or the local
// SQS-compatible server, restarted, killed or drained at will), and
// serves a recording gRPC worker for the drainers to deliver to.
package testcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/procstat"
)

// Spec says how to start a process.
type Spec struct {
	Name string // for logs and errors, e.g. "gateway" or "drainer-1"
	Path string
	Args []string
	// Env is added to the harness's environment.
	Env []string
	// LogPath receives the process's output (stderr is its JSON log),
	// appended, so each incarnation of a restarted process writes to the
	// same file. Empty keeps the log in memory only.
	LogPath string
	// Setup runs on the command before it starts (credentials, limits, a
	// stdout pipe). Stdout left nil goes to LogPath.
	Setup func(*exec.Cmd)
}

// notJSON starts the msg of a log line that was not JSON.
const notJSON = "(not json) "

// Proc is a running process whose JSON log lines are kept.
type Proc struct {
	Spec Spec
	cmd  *exec.Cmd

	mu    sync.Mutex
	lines []map[string]any
	news  chan struct{} // closed (and replaced) on every new line
	done  chan struct{}
	err   error // of Wait, set before done is closed
}

// Start starts a process. It is ended with SIGKILL if the harness dies.
func Start(spec Spec) (*Proc, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if spec.Setup != nil {
		spec.Setup(cmd)
	}
	var logFile *os.File
	if spec.LogPath != "" {
		f, err := os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", spec.Name, err)
		}
		logFile = f
	}
	logOut := io.Discard
	if logFile != nil {
		logOut = logFile
	}
	if cmd.Stdout == nil {
		cmd.Stdout = logOut
	}
	stderr, err := cmd.StderrPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		closeFile(logFile)
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Proc{Spec: spec, cmd: cmd, news: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer closeFile(logFile)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			_, _ = logOut.Write(append(sc.Bytes(), '\n'))
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				line = map[string]any{"msg": notJSON + sc.Text()}
			}
			// Every waiter is woken: one channel send would wake one.
			p.mu.Lock()
			p.lines = append(p.lines, line)
			close(p.news)
			p.news = make(chan struct{})
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
	}()
	return p, nil
}

func closeFile(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and its log is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited (and its log is read).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the exit error; it waits for the exit.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// WaitLog waits up to timeout for a log line whose msg is msg and returns
// it. It fails at once if the process exits first.
func (p *Proc) WaitLog(ctx context.Context, msg string, timeout time.Duration) (map[string]any, error) {
	return p.WaitLogN(ctx, msg, 1, timeout)
}

// WaitLogN waits up to timeout for the n-th log line whose msg is msg.
func (p *Proc) WaitLogN(ctx context.Context, msg string, n int, timeout time.Duration) (map[string]any, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l, news := p.findNews(msg, n)
		if l != nil {
			return l, nil
		}
		select {
		case <-news:
		case <-p.done:
			// The last lines may have arrived with the exit.
			if l := p.find(msg, n); l != nil {
				return l, nil
			}
			return nil, fmt.Errorf("%s exited (%w) before logging %q; last lines:\n%s", p.Spec.Name, p.err, msg, p.Tail(10))
		case <-deadline.C:
			return nil, fmt.Errorf("%s logged no %q within %s; last lines:\n%s", p.Spec.Name, msg, timeout, p.Tail(10))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Addr waits up to a minute for the log line msg and returns its addr
// attribute.
func (p *Proc) Addr(ctx context.Context, msg string) (string, error) {
	l, err := p.WaitLog(ctx, msg, time.Minute)
	if err != nil {
		return "", err
	}
	a, ok := l["addr"].(string)
	if !ok {
		return "", fmt.Errorf("%s: log line %q has no addr", p.Spec.Name, msg)
	}
	return a, nil
}

// Find returns the first log line with the given msg, or nil.
func (p *Proc) Find(msg string) map[string]any { return p.find(msg, 1) }

func (p *Proc) find(msg string, n int) map[string]any {
	l, _ := p.findNews(msg, n)
	return l
}

// findNews is find, with the channel closed at the next line: taken with
// the search, so that no line comes unseen between the two.
func (p *Proc) findNews(msg string, n int) (map[string]any, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return findLine(p.lines, msg, n), p.news
}

func findLine(lines []map[string]any, msg string, n int) map[string]any {
	for _, l := range lines {
		if l["msg"] == msg {
			if n--; n == 0 {
				return l
			}
		}
	}
	return nil
}

// Count returns the number of log lines with the given msg.
func (p *Proc) Count(msg string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.lines {
		if l["msg"] == msg {
			n++
		}
	}
	return n
}

// Lines returns the log lines so far.
func (p *Proc) Lines() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]map[string]any(nil), p.lines...)
}

// Tail returns the last n log lines, JSON-encoded, for error messages.
func (p *Proc) Tail(n int) string {
	lines := p.Lines()
	var b strings.Builder
	for _, l := range lines[max(0, len(lines)-n):] {
		j, _ := json.Marshal(l)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills. It
// is safe to call twice. It returns the exit error of a process that
// failed by itself, nil for a clean exit or one by a signal, and an error
// if it had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			p.Kill()
			return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.Spec.Name, grace)
		}
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && !ee.Exited() {
		return nil // ended by a signal
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w; last lines:\n%s", p.Spec.Name, p.err, p.Tail(10))
	}
	return nil
}

// RSS returns the process's resident set size in bytes (VmRSS).
func (p *Proc) RSS() (int64, error) {
	rss, err := procstat.RSS(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Spec.Name, err)
	}
	return rss, nil
}

// LastMsg returns the message of the last log line (a binary's final
// error is a plain-text line).
func (p *Proc) LastMsg() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lines) == 0 {
		return ""
	}
	msg, _ := p.lines[len(p.lines)-1]["msg"].(string)
	return strings.TrimPrefix(msg, notJSON)
}
