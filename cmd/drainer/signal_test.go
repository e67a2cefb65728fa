//go:build linux

package main

import (
	"os"
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
	proctest.SIGHUPDuringStart(t, func(dir, queues, tenants string) []string {
		return []string{
			"run", "--data-dir", dir, "--queues", queues, "--tenants", tenants,
			"--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", "", "--console=false",
		}
	})
}
