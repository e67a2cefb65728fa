package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
	"github.com/sluice-dev/sluice/topology"
)

// TestOpenBackendWaitsForItsQueues: a drainer started beside the gateway
// that creates the queues (the README's SQS session runs both with &)
// stopped at once when it looked first ("read queue depths: … queue not
// found"). A process that does not create its queues waits for them,
// saying which it waits for, and gives up naming them and what creates
// them.
func TestOpenBackendWaitsForItsQueues(t *testing.T) {
	endpoint := topotest.SQSEndpoint(t)
	flags := BackendFlags{Kind: "sqs", SQSEndpoint: endpoint, Region: fauxqs.Region}
	newTopo := func(t *testing.T) topology.Topology {
		topo, err := topology.Parse([]byte("prefix: " + topotest.FreshPrefix() + "\nlanes:\n  - name: std\n    shards: 2\n"))
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}

	t.Run("created meanwhile", func(t *testing.T) {
		topo := newTopo(t)
		creator, err := sqsqueue.New(t.Context(), sqsqueue.Config{Endpoint: endpoint, Region: fauxqs.Region, Logger: topotest.QuietLog})
		if err != nil {
			t.Fatal(err)
		}
		defer creator.Close()
		created := make(chan error, 1)
		time.AfterFunc(1500*time.Millisecond, func() { created <- creator.EnsureQueues(context.Background(), topo.Specs()) })
		var logs bytes.Buffer
		start := time.Now()
		b, err := OpenBackend(t.Context(), flags, topo, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("OpenBackend: %v", err)
		}
		defer b.Close()
		if err := <-created; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < time.Second {
			t.Errorf("OpenBackend returned after %s, before the queues were created", took)
		}
		if !strings.Contains(logs.String(), "waiting for the queues to exist") || !strings.Contains(logs.String(), topo.ShardQueue("std", 0)) {
			t.Errorf("log %q does not say which queues it waits for", logs.String())
		}
	})

	t.Run("never created", func(t *testing.T) {
		defer func(w time.Duration) { queueWait = w }(queueWait)
		queueWait = 1500 * time.Millisecond
		topo := newTopo(t)
		_, err := OpenBackend(t.Context(), flags, topo, topotest.QuietLog)
		if err == nil || !strings.Contains(err.Error(), topo.DLQ("std")) || !strings.Contains(err.Error(), "--create-queues") {
			t.Fatalf("OpenBackend = %v, want a refusal naming the missing queues and what creates them", err)
		}
	})
}
