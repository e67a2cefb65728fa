package sqsqueue_test

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
)

// endpoint is the local SQS-compatible server every test talks to.
var endpoint string

// TestMain starts fauxqs (test/fauxqs: npm ci if needed, node start.mjs on a
// kernel-chosen loopback port, wait for /health) once for the package, runs
// the tests and stops it. If the server cannot be installed or started the
// tests fail: they never skip, and never reach real AWS.
func TestMain(m *testing.M) {
	flag.Parse()
	// Nothing in these tests may reach AWS: no shared config, no instance
	// metadata, dummy credentials set on every client.
	for k, v := range map[string]string{
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
		"AWS_REGION":                  fauxqs.Region,
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
	} {
		os.Setenv(k, v)
	}
	os.Unsetenv("AWS_PROFILE")
	os.Unsetenv("AWS_ENDPOINT_URL")
	os.Unsetenv("AWS_ENDPOINT_URL_SQS")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	start := time.Now()
	srv, err := fauxqs.Start(ctx, os.Stderr)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: queue/sqsqueue tests need the local SQS server fauxqs (Node.js >= 20 and npm, "+
			"installed from the npm registry into test/fauxqs/node_modules):\n%v\n", err)
		os.Exit(1)
	}
	endpoint = srv.Endpoint
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "fauxqs ready at %s in %s\n", endpoint, time.Since(start).Round(time.Millisecond))
	}

	code := m.Run()
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	if code == 0 {
		// Idle keep-alive connections of the SDK's HTTP clients close on
		// their own timeout; any other goroutine left over is a leak.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testConfig is a Config for the local server with dummy credentials.
func testConfig(t testing.TB) sqsqueue.Config {
	return sqsqueue.Config{
		Endpoint:    endpoint,
		Region:      fauxqs.Region,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		Logger:      slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// newBackend returns a backend on the local server, closed at the end of t.
func newBackend(t testing.TB, mod ...func(*sqsqueue.Config)) *sqsqueue.Backend {
	t.Helper()
	cfg := testConfig(t)
	for _, f := range mod {
		f(&cfg)
	}
	b, err := sqsqueue.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// uniqueName returns a queue name no other test uses (the server is shared).
func uniqueName(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:12])
}

// tWriter routes log lines to t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
