package bench

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

// Proc is a running sluice binary. Its JSON log (stderr) is copied to a
// file, and the first line of each message is kept for WaitLog.
type Proc struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	mu   sync.Mutex
	seen map[string]map[string]any // first log line by msg
	tail []string                  // last lines, for errors
	news chan struct{}             // signalled on every new message
	done chan struct{}
	err  error // of cmd.Wait, set before done is closed
}

// StartProc starts bin with args, its log going to logPath.
func StartProc(name, bin, logPath string, args ...string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	// The child dies with the harness, even if the harness is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout = logf
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, LogPath: logPath, cmd: cmd, seen: map[string]map[string]any{}, news: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logf.Write(append(line, '\n'))
			var m map[string]any
			if json.Unmarshal(line, &m) != nil {
				m = map[string]any{"msg": string(line)}
			}
			msg, _ := m["msg"].(string)
			p.mu.Lock()
			if _, ok := p.seen[msg]; !ok {
				p.seen[msg] = m
			}
			p.tail = append(p.tail, string(line))
			if len(p.tail) > 20 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
			select {
			case p.news <- struct{}{}:
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// WaitLog waits up to timeout for a log line whose msg is msg.
func (p *Proc) WaitLog(ctx context.Context, msg string, timeout time.Duration) (map[string]any, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		m, ok := p.seen[msg]
		p.mu.Unlock()
		if ok {
			return m, nil
		}
		select {
		case <-p.news:
		case <-p.done:
			// The last lines may have arrived with the exit.
			p.mu.Lock()
			m, ok := p.seen[msg]
			p.mu.Unlock()
			if ok {
				return m, nil
			}
			return nil, fmt.Errorf("%s exited (%w) before logging %q; last lines:\n%s", p.Name, p.err, msg, p.lastLines())
		case <-deadline.C:
			return nil, fmt.Errorf("%s logged no %q within %s; last lines:\n%s", p.Name, msg, timeout, p.lastLines())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Addr waits for the log line msg and returns its addr attribute.
func (p *Proc) Addr(ctx context.Context, msg string) (string, error) {
	m, err := p.WaitLog(ctx, msg, time.Minute)
	if err != nil {
		return "", err
	}
	a, ok := m["addr"].(string)
	if !ok {
		return "", fmt.Errorf("%s: log line %q has no addr", p.Name, msg)
	}
	return a, nil
}

func (p *Proc) lastLines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// RSS returns the process's resident set size in bytes (VmRSS).
func (p *Proc) RSS() (int64, error) {
	return procstat.RSS(p.Pid())
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills. It
// is safe to call twice; it returns the exit error of a process that
// failed for another reason than the signal.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", p.Name, grace)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && !ee.Exited() {
		return nil // ended by a signal
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w; last lines:\n%s", p.Name, p.err, p.lastLines())
	}
	return nil
}

// Kill ends the process at once.
func (p *Proc) Kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
