package node

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestObserverStop starts an observer serving /metrics on a loopback port:
// Stop ends the server, and a second Stop returns the first's result.
func TestObserverStop(t *testing.T) {
	t.Parallel()
	b := topotest.Setup(t, topotest.OneLane)
	o, err := StartObserver(t.Context(), ObserveFlags{MetricsListen: "127.0.0.1:0"}, b.Backend, b.Topo, topotest.QuietLog)
	if err != nil {
		t.Fatal(err)
	}
	if o.srv == nil {
		t.Fatal("no metrics server")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range 2 {
		if err := o.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	if err := o.srv.ListenAndServe(); err != http.ErrServerClosed {
		t.Fatalf("metrics server after Stop: %v, want it closed", err)
	}
}
