// Package topotest gives tests a topology's queues on a real backend: the
// embedded store in a temporary directory, or SQS on the local
// SQS-compatible server (test/fauxqs), one server per test binary. The
// drainer's and the admin API's tests share it.
package topotest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
	"github.com/sluice-dev/sluice/topology"
)

// Backends names the backends OnEachBackend runs a test on.
var Backends = []string{"embedded", "sqs"}

// QuietLog discards everything.
var QuietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// Bundle is a real backend holding a topology's queues.
type Bundle struct {
	Backend queue.Backend
	Topo    topology.Topology
}

var (
	fauxOnce sync.Once
	faux     *fauxqs.Server
	fauxErr  error
	prefixes atomic.Int64
)

// Main runs a test binary's tests (call it from TestMain), stops the
// SQS-compatible server if a test started one, and, if the tests passed,
// fails the binary when a goroutine is left running (goleak). The SQS
// variants talk to that local server only; any credentials do.
func Main(m *testing.M) int {
	os.Setenv("AWS_ACCESS_KEY_ID", "test")
	os.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	code := m.Run()
	if faux != nil {
		_ = faux.Stop()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// OnEachBackend runs test as a parallel subtest per backend, each with the
// topology yaml set up on it.
func OnEachBackend(t *testing.T, yaml string, test func(t *testing.T, b *Bundle)) {
	t.Helper()
	for _, kind := range Backends {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, SetupOn(t, kind, yaml))
		})
	}
}

// SetupOn is Setup on the named backend ("embedded" or "sqs"). On SQS each
// call gets queues of its own under a fresh name prefix.
func SetupOn(t testing.TB, kind, yaml string) *Bundle {
	t.Helper()
	if kind == "embedded" {
		return Setup(t, yaml)
	}
	endpoint := SQSEndpoint(t)
	topo, err := topology.Parse(fmt.Appendf(nil, "prefix: %s\n%s", FreshPrefix(), yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqsqueue.New(t.Context(), sqsqueue.Config{Endpoint: endpoint, Region: fauxqs.Region, Logger: QuietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return ensure(t, b, topo)
}

// SQSEndpoint returns the base URL of the local SQS-compatible server,
// started on first use and stopped by Main; its region is fauxqs.Region.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	fauxOnce.Do(func() { faux, fauxErr = fauxqs.Start(context.Background(), nil) })
	if fauxErr != nil {
		t.Fatalf("start the local SQS-compatible server: %v", fauxErr)
	}
	return faux.Endpoint
}

// FreshPrefix returns a queue name prefix no other test of any binary
// uses on the shared SQS server.
func FreshPrefix() string {
	return fmt.Sprintf("t%d-%d", os.Getpid(), prefixes.Add(1))
}

// Setup opens an embedded backend in a temporary directory holding the
// queues of the topology yaml.
func Setup(t testing.TB, yaml string) *Bundle {
	t.Helper()
	topo, err := topology.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "queues.db"), embeddedqueue.Options{Logger: QuietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return ensure(t, b, topo)
}

func ensure(t testing.TB, b queue.Backend, topo topology.Topology) *Bundle {
	t.Helper()
	if err := b.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	return &Bundle{Backend: b, Topo: topo}
}

// Enqueue stores jobs on queue q, in order, as the gateway would.
func (b *Bundle) Enqueue(t testing.TB, q string, envs ...*envelope.Envelope) {
	t.Helper()
	for start := 0; start < len(envs); start += queue.MaxBatch {
		chunk := envs[start:min(start+queue.MaxBatch, len(envs))]
		entries := make([]queue.SendEntry, len(chunk))
		for i, e := range chunk {
			body, err := envelope.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			entries[i] = queue.SendEntry{ID: fmt.Sprint(i), Body: body}
		}
		res, err := b.Backend.Send(t.Context(), &queue.SendParams{Queue: q, Entries: entries})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
}

// Stats returns queue q's counts.
func (b *Bundle) Stats(t testing.TB, q string) queue.Stats {
	t.Helper()
	s, err := b.Backend.Stats(t.Context(), &queue.StatsParams{Queues: []string{q}})
	if err != nil {
		t.Fatal(err)
	}
	return s[0]
}

// DeadLetters reads every visible message of lane's dead-letter queue,
// hands them back (visible again), and returns their envelopes; a body
// that is not an envelope fails t.
func (b *Bundle) DeadLetters(t testing.TB, lane string) []*envelope.Envelope {
	t.Helper()
	q := b.Topo.DLQ(lane)
	var out []*envelope.Envelope
	var receipts []string
	defer func() {
		if err := queue.SetVisibility(context.WithoutCancel(t.Context()), b.Backend, q, receipts, 0); err != nil {
			t.Error(err)
		}
	}()
	for {
		msgs, err := b.Backend.Receive(t.Context(), &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch, VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			receipts = append(receipts, m.ReceiptHandle)
			env, err := envelope.Decode(m.Body)
			if err != nil {
				t.Fatalf("dead letter %s: %v", m.MessageID, err)
			}
			out = append(out, env)
		}
	}
}

// WaitFor polls cond until it holds, failing t after a minute.
func WaitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Envelope is a std-lane job of tenant whose payload is its id.
func Envelope(tenant, id string, enqueuedAt time.Time) *envelope.Envelope {
	return &envelope.Envelope{JobId: id, Tenant: tenant, Lane: "std", Payload: []byte(id), EnqueuedAt: timestamppb.New(enqueuedAt)}
}

// BulkyEnvelopes returns n jobs of tenant at the gateway's limits: a 4 KiB
// payload and 16 attributes of 1 KiB, with ids <tenant>-000, <tenant>-001, ….
func BulkyEnvelopes(tenant string, n int) []*envelope.Envelope {
	envs := make([]*envelope.Envelope, 0, n)
	for i := range n {
		e := Envelope(tenant, fmt.Sprintf("%s-%03d", tenant, i), time.Now())
		e.Payload = bytes.Repeat([]byte("p"), 4096)
		e.Attributes = map[string]string{}
		for k := range 16 {
			e.Attributes[fmt.Sprintf("attr-%02d", k)] = strings.Repeat("v", 1024)
		}
		envs = append(envs, e)
	}
	return envs
}

// OneLane is a topology of one lane, std, with four shards.
const OneLane = `
max_receive_count: 3
lanes:
  - name: std
    shards: 4
    shard_choices: 2
    staleness_bound: 1m
`
