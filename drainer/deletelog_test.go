package drainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/queue"
)

// failingDeleter is a backend whose deletes all fail, as on a full or
// read-only disk.
type failingDeleter struct{ queue.Backend }

func (failingDeleter) Delete(context.Context, *queue.DeleteParams) ([]error, error) {
	return nil, errors.New("commit: write queues.db.wal: no space left on device")
}

// TestFailedDeletesLogALine: with every delete after delivery failing,
// the drainer logs "delete after delivery failed" once per
// ratelog.Every, not once per job: on a full disk every delivered job
// logged a line, on what is often the same disk (found by a tester).
func TestFailedDeletesLogALine(t *testing.T) {
	t.Parallel()
	const jobs = 20
	tb := setup(t, "lanes:\n  - {name: std, shards: 1}\n")
	q := tb.topo.ShardQueue("std", 0)
	for i := range jobs {
		tb.enqueue(t, q, testEnvelope("t", fmt.Sprintf("j%02d", i), time.Now()))
	}
	var logs syncbuf.Buffer
	rec := newRecorder()
	d, err := New(Config{
		Backend: failingDeleter{tb.backend}, Topology: tb.topo, Handler: rec, Concurrency: 4,
		PollWait: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, jobs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), `msg="delete after delivery failed"`); n != 1 {
		t.Fatalf("%d lines of %d failed deletes:\n%s\nwant one", n, jobs, logs.String())
	}
}
