package ctl_test

import (
	"context"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/ctl"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/pull"
	"github.com/sluice-dev/sluice/tenant"
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

// servePull starts a real pull hub (no drainer behind it) on loopback for
// lanes std and bulk, with the worker key "wk"; it returns the address
// and a channel that receives the per-lane credits each time they change.
func servePull(t *testing.T) (string, <-chan map[string]int) {
	t.Helper()
	credits := make(chan map[string]int, 16)
	hub, err := pull.New(pull.Config{
		Authenticate: func(key string) (*tenant.Worker, bool) {
			return &tenant.Worker{Name: "w"}, key == "wk"
		},
		Lanes: []string{"std", "bulk"},
		Capacity: func(_ int, lanes map[string]int) {
			select {
			case credits <- maps.Clone(lanes):
			default:
			}
		},
		Logger: topotest.QuietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	workerv1.RegisterPullServiceServer(srv, hub)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hub.Stop(ctx)
	})
	return lis.Addr().String(), credits
}

// TestWorkerLanesIgnoreEmptyItems: --lanes "std," (a trailing comma) or
// "std,,bulk" sent an empty lane name in the Hello, and the worker exited
// with the server's `hello.lanes: this drainer has no lane ""`, which does
// not point at the comma. Empty items are ignored, as in the dlq
// commands' lists; a list of nothing but commas is refused, naming the
// flag, rather than serving every lane.
func TestWorkerLanesIgnoreEmptyItems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		lanes string
		want  map[string]int // credits per lane once connected
	}{
		{"std,", map[string]int{"std": 2}},
		{"std,,bulk", map[string]int{"std": 2, "bulk": 2}},
		{" ,bulk , ", map[string]int{"bulk": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.lanes, func(t *testing.T) {
			t.Parallel()
			addr, credits := servePull(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var stderr strings.Builder
			done := make(chan error, 1)
			go func() {
				done <- ctl.Run(ctx, []string{"worker", "--addr", addr, "--key", "wk", "--concurrency", "2", "--lanes", tt.lanes}, new(strings.Builder), &stderr)
			}()
			deadline := time.After(10 * time.Second)
			for connected := false; !connected; {
				select {
				case got := <-credits:
					if len(got) == 0 {
						continue // the worker left
					}
					if !maps.Equal(got, tt.want) {
						t.Errorf("--lanes %q: credits per lane %v, want %v", tt.lanes, got, tt.want)
					}
					connected = true
				case err := <-done:
					t.Fatalf("--lanes %q: the worker exited before serving: %v\n%s", tt.lanes, err, stderr.String())
				case <-deadline:
					t.Fatalf("--lanes %q: the worker did not connect\n%s", tt.lanes, stderr.String())
				}
			}
			cancel()
			<-done
		})
	}
	// Refused before dialling: the address is never reached (bounded, as
	// a worker that dialled would retry it until the context ends).
	for _, lanes := range []string{",", " , ,"} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := ctl.Run(ctx, []string{"worker", "--addr", "127.0.0.1:1", "--key", "wk", "--lanes", lanes}, new(strings.Builder), new(strings.Builder))
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--lanes") || !strings.Contains(err.Error(), "names no lane") {
			t.Errorf("--lanes %q: %v, want a refusal saying --lanes names no lane", lanes, err)
		}
	}
}
