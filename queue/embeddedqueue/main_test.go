package embeddedqueue

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/queue"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path) // never returns: the parent kills it
	}
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testLogger routes the backend's logs to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// bundle is what setup returns besides the backend.
type bundle struct {
	path  string
	clock *fakeClock
}

// setup opens a backend in a fresh directory with a fake clock and closes
// it when the test ends.
func setup(t *testing.T) (*Backend, *bundle) {
	t.Helper()
	return setupWith(t, Options{}, knobs{})
}

func setupWith(t *testing.T, opts Options, k knobs) (*Backend, *bundle) {
	t.Helper()
	bun := &bundle{path: filepath.Join(t.TempDir(), "queues.db"), clock: newFakeClock()}
	opts.Logger = testLogger(t)
	if opts.Clock == nil {
		opts.Clock = bun.clock.Now
	}
	b, err := open(bun.path, opts, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, bun
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func mustEnsure(t *testing.T, b *Backend, specs ...queue.QueueSpec) {
	t.Helper()
	if err := b.EnsureQueues(t.Context(), specs); err != nil {
		t.Fatal(err)
	}
}

// sendOne sends body to q with a delay and returns its message ID.
func sendOne(t *testing.T, b *Backend, q, body string, delay time.Duration) string {
	t.Helper()
	res, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "0", Body: []byte(body), Delay: delay}}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	return res[0].MessageID
}

func receive(t *testing.T, b *Backend, q string, n int, visibility time.Duration) []queue.Message {
	t.Helper()
	msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: n, VisibilityTimeout: visibility})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func stats(t *testing.T, b *Backend, q string) queue.Stats {
	t.Helper()
	s, err := b.Stats(t.Context(), &queue.StatsParams{Queues: []string{q}})
	if err != nil {
		t.Fatal(err)
	}
	return s[0]
}

func deleteOne(t *testing.T, b *Backend, q, handle string) error {
	t.Helper()
	res, err := b.Delete(t.Context(), &queue.DeleteParams{Queue: q, ReceiptHandles: []string{handle}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func changeOne(t *testing.T, b *Backend, q, handle string, timeout time.Duration) error {
	t.Helper()
	res, err := b.ChangeVisibility(t.Context(), &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: handle, Timeout: timeout}}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}
