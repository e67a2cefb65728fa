package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// The scenario tests share one build of the binaries and one
// SQS-compatible server, made by the first test that needs them.
var (
	envOnce sync.Once
	env     *testcluster.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env != nil {
		env.StopSQS()
		if os.Getenv("RELIABILITY_KEEP") == "" {
			os.RemoveAll(env.Work)
		} else {
			fmt.Fprintln(os.Stderr, "kept", env.Work)
		}
	}
	os.Exit(code)
}

func setup() (*testcluster.Env, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-reliability-test")
	if err != nil {
		return nil, err
	}
	e, err := testcluster.NewEnv(ctx, dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	e.SQSLog = os.Stderr
	return e, nil
}

// testEnv returns the shared environment with progress logged to t.
func testEnv(t *testing.T) *Env {
	t.Helper()
	envOnce.Do(func() { env, envErr = setup() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return &Env{Env: env, Logf: t.Logf}
}
