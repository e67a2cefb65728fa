package admin

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/topotest"
)

func TestMain(m *testing.M) { os.Exit(topotest.Main(m)) }

// stopAdmin stops a, failing t if its replays do not settle in time.
func stopAdmin(t *testing.T, a *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Error(err)
	}
}
