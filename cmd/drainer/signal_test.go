//go:build linux

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sluice-dev/sluice/internal/proctest"
)

// TestMain runs the drainer itself when a test starts this binary as one
// (proctest.Start).
func TestMain(m *testing.M) {
	proctest.Main(main)
	os.Exit(m.Run())
}

// TestSIGHUPDuringStart: a SIGHUP that arrives while the drainer is still
// starting (blocked reading its queue config, a FIFO the test writes after
// the signal) is queued as a tenant reload, not fatal. The handler was
// installed only once the tenant watcher started, after the store was
// open: a SIGHUP sent before killed the process (found in review).
func TestSIGHUPDuringStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queues := filepath.Join(dir, "queues.fifo")
	if err := syscall.Mkfifo(queues, 0o600); err != nil {
		t.Fatal(err)
	}
	tenants := filepath.Join(dir, "tenants.yaml")
	if err := os.WriteFile(tenants, []byte("tenants:\n  - {id: acme, tier: standard, api_keys: [acme-key-1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := proctest.Start(t, "run", "--data-dir", dir, "--queues", queues, "--tenants", tenants,
		"--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", "", "--console=false")
	p.SignalDuringOpen(t, queues, syscall.SIGHUP, "lanes:\n  - name: standard\n")
	p.WaitLog(t, "SIGHUP: tenant config unchanged")
	p.Stop(t)
}
