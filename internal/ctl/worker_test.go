package ctl_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/ctl"
)

// TestWorkerPullAddressFromEnvironment: sluicectl worker pulls from
// SLUICE_PULL_ADDR. It read SLUICE_WORKER_ADDR, which the gateway and
// drainer read as --worker-addr, the push worker's address: one variable
// named two addresses, and an environment shared by both pointed one of
// them at the wrong place (found in review). SLUICE_WORKER_ADDR alone is
// still read, with a warning naming the new variable. (Not parallel: it
// sets the environment.)
func TestWorkerPullAddressFromEnvironment(t *testing.T) {
	tests := []struct {
		name      string
		pull, old bool // set SLUICE_PULL_ADDR, SLUICE_WORKER_ADDR
		wantOld   bool // the worker dials SLUICE_WORKER_ADDR's listener
		wantWarn  bool
	}{
		{"SLUICE_PULL_ADDR", true, false, false, false},
		{"both: SLUICE_PULL_ADDR wins", true, true, false, false},
		{"SLUICE_WORKER_ADDR alone, with a warning", false, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pullLis, pullConns := listen(t)
			oldLis, oldConns := listen(t)
			t.Setenv("SLUICE_PULL_ADDR", "")
			t.Setenv("SLUICE_WORKER_ADDR", "")
			if tt.pull {
				t.Setenv("SLUICE_PULL_ADDR", pullLis.Addr().String())
			}
			if tt.old {
				t.Setenv("SLUICE_WORKER_ADDR", oldLis.Addr().String())
			}
			ctx, cancel := context.WithCancel(t.Context())
			var stderr strings.Builder
			done := make(chan error, 1)
			go func() { done <- ctl.Run(ctx, []string{"worker", "--key", "k"}, new(strings.Builder), &stderr) }()
			var gotOld bool
			select {
			case <-pullConns:
			case <-oldConns:
				gotOld = true
			case <-time.After(10 * time.Second):
				t.Error("the worker dialled neither address")
			}
			cancel()
			<-done
			if gotOld != tt.wantOld {
				t.Errorf("dialled SLUICE_WORKER_ADDR's address: %v, want %v", gotOld, tt.wantOld)
			}
			if warned := strings.Contains(stderr.String(), "set SLUICE_PULL_ADDR"); warned != tt.wantWarn {
				t.Errorf("warned: %v, want %v; stderr:\n%s", warned, tt.wantWarn, stderr.String())
			}
		})
	}
}

// listen opens a loopback listener whose accepted connections are
// reported on the channel (and closed).
func listen(t *testing.T) (net.Listener, <-chan struct{}) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	conns := make(chan struct{}, 1)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			select {
			case conns <- struct{}{}:
			default:
			}
		}
	}()
	return lis, conns
}
