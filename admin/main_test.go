package admin

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/internal/topotest"
)

func TestMain(m *testing.M) {
	code := topotest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// stopAdmin stops a, failing t if its replays do not settle in time.
func stopAdmin(t *testing.T, a *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		t.Error(err)
	}
}
