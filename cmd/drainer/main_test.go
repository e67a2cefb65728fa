package main

import (
	"context"
	"io"
	"testing"
)

// TestStopDuringStartIsClean: a stop signal during start-up (ctx ends
// before the drainer is up) ends it with no error. The start-up work under
// way failed with ctx, and the drainer exited with status 1 and a
// "context canceled" error, a failure to whatever supervises it, for the
// stop it was asked for (found in review).
func TestStopDuringStartIsClean(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := run(ctx, []string{"--data-dir", t.TempDir(), "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, io.Discard)
	if err != nil {
		t.Fatalf("run: %v, want no error", err)
	}
}
