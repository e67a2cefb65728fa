package ctl_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// reportedAges wraps a backend: Stats reports every queue with a job
// visible and the oldest age age, as SQS reports 0 with jobs waiting.
type reportedAges struct {
	queue.Backend
	age time.Duration
}

func (r reportedAges) Stats(ctx context.Context, p *queue.StatsParams) ([]queue.Stats, error) {
	stats, err := r.Backend.Stats(ctx, p)
	for i := range stats {
		stats[i].Visible, stats[i].OldestAge = 1, r.age
	}
	return stats, err
}

// TestStatsShowsUnknownOldestAge: a queue whose oldest age is 0 (empty,
// or on SQS, which cannot tell) shows "—" in the OLDEST column, as the web
// console does, and leaves oldestAge out of --json, as protojson leaves
// out the counts that are 0. SQS queues showed 0s, jobs waiting or not
// (found in a walkthrough).
func TestStatsShowsUnknownOldestAge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		age   time.Duration
		table string // the OLDEST column
		json  string // oldestAge in --json; "" when left out
	}{
		{"unknown (SQS)", 0, "—", ""},
		{"negative", -time.Second, "—", ""},
		{"young", 300 * time.Millisecond, "0s", "0.300s"},
		{"known", 90*time.Second + 400*time.Millisecond, "1m30s", "90.400s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tb := topotest.Setup(t, topotest.OneLane)
			addr := serveAdmin(t, reportedAges{tb.Backend, tt.age}, tb)
			out, err := run(t, "stats", "--admin-addr", addr, "--admin-key", "k")
			if err != nil {
				t.Fatalf("stats: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) < 2 || !strings.HasSuffix(strings.TrimSpace(lines[0]), "OLDEST") {
				t.Fatalf("stats printed\n%s", out)
			}
			for _, row := range lines[1:] {
				f := strings.Fields(row)
				if got := f[len(f)-1]; got != tt.table {
					t.Errorf("OLDEST %q, want %q in\n%s", got, tt.table, out)
				}
			}

			out, err = run(t, "stats", "--json", "--admin-addr", addr, "--admin-key", "k")
			if err != nil {
				t.Fatalf("stats --json: %v\n%s", err, out)
			}
			var resp struct {
				Queues []struct {
					Queue     string
					Visible   string
					OldestAge *string
				}
			}
			if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Queues) == 0 {
				t.Fatalf("stats --json: %v\n%s", err, out)
			}
			for _, q := range resp.Queues {
				got := ""
				if q.OldestAge != nil {
					got = *q.OldestAge
				}
				if got != tt.json || q.Visible != "1" {
					t.Errorf("%s: oldestAge %q, visible %q; want %q, 1", q.Queue, got, q.Visible, tt.json)
				}
			}
		})
	}
}

// TestStatsMarksRetiredShards: a shard queue past its lane's shard count
// that still held jobs at start is marked retired in the table and in
// --json; it was listed as one more shard, where no new job goes.
func TestStatsMarksRetiredShards(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane) // std has 4 shards
	retired := tb.Topo.ShardQueue("std", 5)
	tb.Topo = tb.Topo.WithRetiredShards([]string{retired})
	if err := tb.Backend.EnsureQueues(t.Context(), tb.Topo.Specs()); err != nil {
		t.Fatal(err)
	}
	addr := serveAdmin(t, tb.Backend, tb)
	out, err := run(t, "stats", "--admin-addr", addr, "--admin-key", "k")
	if err != nil {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[0], "-shard-") {
			continue
		}
		shard4or5 := f[0] == tb.Topo.ShardQueue("std", 4) || f[0] == retired
		if marked := strings.Contains(line, "shard (retired)"); marked != shard4or5 {
			t.Errorf("%s: marked retired %v, want %v:\n%s", f[0], marked, shard4or5, out)
		}
	}
	out, err = run(t, "stats", "--json", "--admin-addr", addr, "--admin-key", "k")
	if err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	var resp struct {
		Queues []struct {
			Queue   string
			Retired bool
		}
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, q := range resp.Queues {
		if q.Retired {
			got = append(got, q.Queue)
		}
	}
	if want := []string{tb.Topo.ShardQueue("std", 4), retired}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("--json marks %q retired, want %q", got, want)
	}
}
