package testcluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProcLog starts a real shell that logs JSON lines and checks what
// the harness reads from them.
func TestProcLog(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, script, msg string
		n                 int
		wantAddr, wantErr string
	}{
		{name: "first line", script: `echo '{"msg":"up","addr":"127.0.0.1:1"}' >&2; exec sleep 60`, msg: "up", n: 1, wantAddr: "127.0.0.1:1"},
		{name: "second line", script: `echo '{"msg":"up","addr":"a"}' >&2; echo '{"msg":"up","addr":"b"}' >&2; exec sleep 60`, msg: "up", n: 2, wantAddr: "b"},
		{name: "last line at exit", script: `echo '{"msg":"up","addr":"c"}' >&2`, msg: "up", n: 1, wantAddr: "c"},
		{name: "exit first", script: `echo 'boom' >&2; exit 3`, msg: "up", n: 1, wantErr: "exited (exit status 3) before logging"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logPath := filepath.Join(t.TempDir(), "p.log")
			p, err := Start(Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", tt.script}, LogPath: logPath})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill()
			l, err := p.WaitLogN(t.Context(), tt.msg, tt.n, 30*time.Second)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || p.LastMsg() != "boom" {
					t.Fatalf("WaitLogN = %v, %v (last msg %q); want an error with %q", l, err, p.LastMsg(), tt.wantErr)
				}
				return
			}
			if err != nil || l["addr"] != tt.wantAddr {
				t.Fatalf("WaitLogN = %v, %v; want addr %q", l, err, tt.wantAddr)
			}
			if err := p.Stop(10 * time.Second); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if got := p.Count(tt.msg); got != tt.n {
				t.Errorf("Count(%q) = %d, want %d", tt.msg, got, tt.n)
			}
		})
	}
}

// TestProcLogWaiters checks that every goroutine waiting for a log line
// sees it when it comes, not only the first one woken.
func TestProcLogWaiters(t *testing.T) {
	t.Parallel()
	p, err := Start(Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", `sleep 0.5; echo '{"msg":"up"}' >&2; exec sleep 60`}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	const waiters = 4
	errs := make(chan error, waiters)
	for range waiters {
		go func() {
			_, err := p.WaitLog(t.Context(), "up", 5*time.Second)
			errs <- err
		}()
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Errorf("a waiter missed the line: %v", err)
		}
	}
}
