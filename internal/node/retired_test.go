package node

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
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

// TestStrandedQueuesAreNamed: jobs in the queues of a lane removed from
// --queues, or under a prefix no longer used, were never delivered and
// nothing was logged (found in a walkthrough). The start warns, naming
// each queue that holds jobs and how many; empty ones are not named, and
// a topology that names every queue warns of nothing.
func TestStrandedQueuesAreNamed(t *testing.T) {
	t.Parallel()
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	parse := func(yaml string) topology.Topology {
		topo, err := topology.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return topo
	}
	both := parse("lanes:\n  - name: std\n    shards: 2\n  - name: bulk\n    shards: 2\n")
	if err := b.EnsureQueues(t.Context(), both.Specs()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{both.ShardQueue("bulk", 0), both.ShardQueue("bulk", 0), both.ShardQueue("bulk", 1), both.ShardQueue("std", 1)} {
		if _, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, yaml string
		want       []string // in the warning; nil: no warning
	}{
		{"every lane named", "lanes:\n  - name: std\n    shards: 2\n  - name: bulk\n    shards: 2\n", nil},
		{"a lane removed", "lanes:\n  - name: std\n    shards: 2\n", []string{"sluice-bulk-shard-00 (2)", "sluice-bulk-shard-01 (1)", `"jobs":3`}},
		{"the prefix changed", "prefix: other\nlanes:\n  - name: std\n    shards: 2\n  - name: bulk\n    shards: 2\n", []string{"sluice-bulk-shard-00 (2)", "sluice-std-shard-01 (1)", `"jobs":4`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			WithRetiredShards(t.Context(), b, parse(tc.yaml), slog.New(slog.NewJSONHandler(&logs, nil)))
			warned := strings.Contains(logs.String(), "nothing here delivers them")
			if warned != (tc.want != nil) {
				t.Fatalf("log %q: warned %t, want %t", logs.String(), warned, tc.want != nil)
			}
			for _, w := range tc.want {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("warning %q does not name %q", logs.String(), w)
				}
			}
			if strings.Contains(logs.String(), "dlq") || strings.Contains(logs.String(), "spillover") {
				t.Errorf("warning %q names empty queues", logs.String())
			}
		})
	}
}
