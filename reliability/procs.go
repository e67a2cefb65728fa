package reliability

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/internal/procstat"
)

// Binaries are the paths of the built sluice binaries.
type Binaries struct {
	Gateway string
	Drainer string
}

// ModuleDir returns the root of the sluice module (the directory above
// this package).
func ModuleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// Build compiles cmd/gateway and cmd/drainer into dir. The binaries are
// built without the race detector: they run under load for minutes, and
// the e2e tests already run them with it.
func Build(ctx context.Context, dir string) (Binaries, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/gateway", "./cmd/drainer")
	cmd.Dir = ModuleDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Binaries{}, fmt.Errorf("build binaries: %w\n%s", err, out)
	}
	return Binaries{Gateway: filepath.Join(dir, "gateway"), Drainer: filepath.Join(dir, "drainer")}, nil
}

// FreePort returns a loopback address with a port that was free a moment
// ago. Processes that restart keep their address, so clients reconnect.
//
// The port is picked below the kernel's ephemeral range: a port the kernel
// handed out (":0") is one it may soon give to an outgoing connection's
// local end, and under the harness's load (thousands of connections to
// the SQS-compatible server) that took a restarting gateway's address.
//
// A port is never handed out twice by one process: a port that is free
// because its process was just killed and is about to restart on it must
// not go to another cluster.
func FreePort() (string, error) {
	lo := ephemeralLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	var lastErr error
	for range 100 {
		port := freePortFloor + rand.N(lo-freePortFloor)
		if handedOut.ports[port] {
			continue
		}
		lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			lastErr = err
			continue
		}
		handedOut.ports[port] = true
		addr := lis.Addr().String()
		return addr, lis.Close()
	}
	return "", fmt.Errorf("find a free port below %d: %w", lo, lastErr)
}

// handedOut holds the ports FreePort has returned.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePortFloor is the lowest port FreePort picks.
const freePortFloor = 10000

// ephemeralLow returns the first port of the kernel's ephemeral range
// (32768 by default on Linux).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > freePortFloor+1000 {
				return lo
			}
		}
	}
	return 32768
}

// ProcSpec says how to start a process.
type ProcSpec struct {
	Name string // for logs and reports, e.g. "gateway" or "drainer-1"
	Path string
	Args []string
	// Env is added to the harness's environment.
	Env []string
	// LogPath receives the process's stderr (its JSON log), appended; each
	// incarnation of a restarted process writes to the same file.
	LogPath string
	// Setup runs on the command before it starts (credentials, limits).
	Setup func(*exec.Cmd)
}

// notJSON starts the msg of a log line that was not JSON.
const notJSON = "(not json) "

// Proc is a running process whose JSON log lines are kept.
type Proc struct {
	Spec ProcSpec
	cmd  *exec.Cmd

	mu    sync.Mutex
	lines []map[string]any
	done  chan struct{}
	err   error // of Wait, set before done is closed
}

// Start starts a process. It is ended with SIGKILL if the harness dies.
func Start(spec ProcSpec) (*Proc, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if spec.Setup != nil {
		spec.Setup(cmd)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	var logFile *os.File
	if spec.LogPath != "" {
		if logFile, err = os.OpenFile(spec.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return nil, fmt.Errorf("start %s: %w", spec.Name, err)
		}
	}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			_ = logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p := &Proc{Spec: spec, cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if logFile != nil {
				_, _ = logFile.Write(append(sc.Bytes(), '\n'))
			}
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				line = map[string]any{"msg": notJSON + sc.Text()}
			}
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		if logFile != nil {
			_ = logFile.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and its log is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit error; valid once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// WaitLog waits up to timeout for a log line whose msg is msg and returns
// it. It fails at once if the process exits first.
func (p *Proc) WaitLog(ctx context.Context, msg string, timeout time.Duration) (map[string]any, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	seen := 0
	for {
		p.mu.Lock()
		for ; seen < len(p.lines); seen++ {
			if p.lines[seen]["msg"] == msg {
				l := p.lines[seen]
				p.mu.Unlock()
				return l, nil
			}
		}
		p.mu.Unlock()
		select {
		case <-p.done:
			if l := p.Find(msg); l != nil {
				return l, nil
			}
			return nil, fmt.Errorf("%s exited (%w) before logging %q; last lines: %s", p.Spec.Name, p.err, msg, p.Tail(5))
		case <-deadline.C:
			return nil, fmt.Errorf("%s logged no %q within %s; last lines: %s", p.Spec.Name, msg, timeout, p.Tail(5))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Find returns the first log line with the given msg, or nil.
func (p *Proc) Find(msg string) map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.lines {
		if l["msg"] == msg {
			return l
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

// Tail returns the last n log lines, JSON-encoded, for error messages.
func (p *Proc) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines[max(0, len(p.lines)-n):] {
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
// returns the exit error of a process that exited by itself, nil for a
// clean exit, and an error if it had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not exit within %s of SIGTERM; killed", p.Spec.Name, grace)
	}
}

// RSS returns the process's resident set size in bytes (VmRSS in
// /proc/<pid>/status).
func (p *Proc) RSS() (int64, error) {
	rss, err := procstat.RSS(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Spec.Name, err)
	}
	return rss, nil
}
