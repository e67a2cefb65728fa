package node

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/topology"
)

// TestWithRetiredShards: on a store made with 8 shards per lane, a
// topology of 2 keeps the removed shard queues that hold jobs, up to the
// last of them, and leaves out those that are empty.
func TestWithRetiredShards(t *testing.T) {
	t.Parallel()
	eight := topology.Default()
	eight.Lanes = append([]topology.Lane(nil), eight.Lanes...)
	for i := range eight.Lanes {
		eight.Lanes[i].Shards = 8
	}
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.EnsureQueues(t.Context(), eight.Specs()); err != nil {
		t.Fatal(err)
	}
	// standard: a job in shard 5 (shards 2 to 5 are kept); premium and
	// free: nothing past shard 1.
	if _, err := b.Send(t.Context(), &queue.SendParams{Queue: eight.ShardQueue("standard", 5), Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Send(t.Context(), &queue.SendParams{Queue: eight.ShardQueue("premium", 1), Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}}); err != nil {
		t.Fatal(err)
	}
	two := topology.Default()
	two.Lanes = append([]topology.Lane(nil), two.Lanes...)
	for i := range two.Lanes {
		two.Lanes[i].Shards = 2
	}
	got := WithRetiredShards(t.Context(), b, two, slog.New(slog.DiscardHandler))
	for lane, want := range map[string]int{"standard": 4, "premium": 0, "free": 0} {
		if l, _ := got.Lane(lane); l.RetiredShards != want || l.Shards != 2 {
			t.Errorf("lane %s: shards %d, retired %d; want 2 and %d", lane, l.Shards, l.RetiredShards, want)
		}
	}
}
