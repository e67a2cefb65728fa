//go:build linux

// Package proctest runs a command's main in a child process of its own
// test binary, for what only a whole process shows: how it takes signals
// and how it exits. Linux only (it reads /proc).
package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// envRunMain marks a child started by Start: Main runs the command there.
const envRunMain = "PROCTEST_RUN_MAIN"

// timeout bounds each wait for the child.
const timeout = 30 * time.Second

// Main runs main and exits if this process is a child started by Start;
// otherwise it returns at once. Call it first in TestMain.
func Main(main func()) {
	if os.Getenv(envRunMain) != "1" {
		return
	}
	main()
	os.Exit(0)
}

// Proc is a running child: the command's main with the given arguments.
type Proc struct {
	cmd  *exec.Cmd
	out  output
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// Start runs the command's main in a child with args; the child is killed
// at the end of the test if it still runs.
func Start(t *testing.T, args ...string) *Proc {
	t.Helper()
	p := &Proc{cmd: exec.Command(os.Args[0], args...), done: make(chan struct{})}
	p.out.changed = make(chan struct{})
	p.cmd.Env = append(os.Environ(), envRunMain+"=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// SignalDuringOpen waits until the child opens fifo (a named pipe) to
// read it, sends it sig, waits until the signal has been taken off the
// process's pending set (its handler, Go's, runs), then writes content to
// the pipe: the signal lands while the child waits for that read.
func (p *Proc) SignalDuringOpen(t *testing.T, fifo string, sig syscall.Signal, content string) {
	t.Helper()
	var f *os.File
	deadline := time.Now().Add(timeout)
	for {
		var err error
		// O_NONBLOCK: the open fails with ENXIO while no reader has the
		// pipe open, instead of waiting for one that may never come.
		if f, err = os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) {
			t.Fatal(err)
		}
		p.pause(t, deadline, "to open "+fifo)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	for p.pending(t, sig) {
		p.pause(t, deadline, "to take "+sig.String())
	}
	if _, err := f.WriteString(content); err != nil {
		t.Logf("write %s: %v", fifo, err) // the child may be gone: WaitLog says so
	}
	_ = f.Close()
}

// pending reports whether sig waits in the child's shared pending set.
func (p *Proc) pending(t *testing.T, sig syscall.Signal) bool {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return false // gone
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("ShdPnd %q: %v", v, err)
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatal("no ShdPnd in /proc/<pid>/status")
	return false
}

// pause waits a moment while the child runs; it fails the test if the
// child has exited or the deadline has passed.
func (p *Proc) pause(t *testing.T, deadline time.Time, what string) {
	t.Helper()
	if time.Now().After(deadline) {
		t.Fatalf("waited %s for the child %s; its output:\n%s", timeout, what, p.out.String())
	}
	select {
	case <-p.done:
		t.Fatalf("the child exited (%v) before it was ready %s; its output:\n%s", p.err, what, p.out.String())
	case <-time.After(time.Millisecond):
	}
}

// WaitLog waits until the child's output contains s; it fails the test if
// the child exits first.
func (p *Proc) WaitLog(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		changed := p.out.watch()
		if strings.Contains(p.out.String(), s) {
			return
		}
		select {
		case <-changed:
		case <-p.done:
			if !strings.Contains(p.out.String(), s) {
				t.Fatalf("the child exited (%v) without writing %q; its output:\n%s", p.err, s, p.out.String())
			}
			return
		case <-deadline:
			t.Fatalf("the child wrote no %q in %s; its output:\n%s", s, timeout, p.out.String())
		}
	}
}

// Stop sends the child SIGTERM and waits for it: it must exit with
// status 0.
func (p *Proc) Stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v (the child exited: %v); its output:\n%s", err, p.err, p.out.String())
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("the child did not stop in %s after SIGTERM; its output:\n%s", timeout, p.out.String())
	}
	if p.err != nil {
		t.Fatalf("the child exited with %v, want status 0; its output:\n%s", p.err, p.out.String())
	}
}

// output collects the child's stdout and stderr and tells waiters of each
// write.
type output struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{} // closed and replaced on each write
}

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.Write(b)
	close(o.changed)
	o.changed = make(chan struct{})
	return len(b), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// watch returns a channel closed on the next write.
func (o *output) watch() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

// SIGHUPDuringStart starts the command with the arguments args returns
// for a data directory, a queue file and a tenant file, sends it SIGHUP
// while it is still starting (blocked reading its queue file, a named
// pipe written only after the signal), and checks that it took the
// signal as a tenant reload once ready and stops cleanly on SIGTERM.
func SIGHUPDuringStart(t *testing.T, args func(dataDir, queues, tenants string) []string) {
	t.Helper()
	dir := t.TempDir()
	queues := filepath.Join(dir, "queues.fifo")
	if err := syscall.Mkfifo(queues, 0o600); err != nil {
		t.Fatal(err)
	}
	tenants := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(tenants, []byte("tenants:\n  - {id: acme, tier: standard, api_keys: [acme-key-1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := Start(t, args(dir, queues, tenants)...)
	p.SignalDuringOpen(t, queues, syscall.SIGHUP, "lanes:\n  - name: standard\n")
	p.WaitLog(t, "SIGHUP: tenant config unchanged")
	p.Stop(t)
}
