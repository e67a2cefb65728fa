package reliability

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/test/fauxqs"
)

// The scenario tests share one build of the binaries and one
// SQS-compatible server, made by the first test that needs them.
var (
	envOnce sync.Once
	env     *Env
	envErr  error
	server  *fauxqs.Server
	workDir string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if server != nil {
		_ = server.Stop()
	}
	if workDir != "" {
		if os.Getenv("RELIABILITY_KEEP") == "" {
			os.RemoveAll(workDir)
		} else {
			fmt.Fprintln(os.Stderr, "kept", workDir)
		}
	}
	os.Exit(code)
}

func setup() (*Env, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-reliability-test")
	if err != nil {
		return nil, err
	}
	workDir = dir
	bin, err := Build(ctx, dir)
	if err != nil {
		return nil, err
	}
	if server, err = fauxqs.Start(ctx, os.Stderr); err != nil {
		return nil, err
	}
	return &Env{Bin: bin, Dir: dir, SQSEndpoint: server.Endpoint}, nil
}

// testEnv returns the shared environment with progress logged to t.
func testEnv(t *testing.T) *Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = setup() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	e := *env
	e.Logf = t.Logf
	return &e
}
