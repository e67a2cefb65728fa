package topology

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

func TestParseRefusesCorruptValues(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"NaN drain rate", "lanes:\n  - {name: a, drain_rate: .nan, high_water_mark: 10}\n", "capacity must be positive"},
		{"infinite drain rate", "lanes:\n  - {name: a, drain_rate: .inf, high_water_mark: 10}\n", "capacity must be positive"},
		{"weight that overflows a sum", "lanes:\n  - {name: a, weight: 4611686018427387904}\n  - {name: b, weight: 4611686018427387904}\n", "weight 4611686018427387904 must be 1 to 1000"},
		{"negative weight", "lanes:\n  - {name: a, weight: -1}\n", "weight -1"},
		{"not a mapping", "- a\n- b\n", "line 1"},
		{"lane of the wrong type", "lanes:\n  - 5\n", "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// FuzzParse feeds arbitrary files to the topology loader: it never
// panics, and whatever it accepts is a topology the gateway, drainers and
// backends can use as is.
func FuzzParse(f *testing.F) {
	f.Add([]byte("lanes:\n  - name: a\n    shards: 8\n    shard_choices: 3\n    visibility_timeout: 45s\n"))
	f.Add([]byte("prefix: sluice\nmax_receive_count: 5\nlanes:\n  - {name: premium, shards: 4, weight: 6}\n  - {name: standard, shards: 4, weight: 3, high_water_mark: 5, drain_rate: 2}\n  - {name: free, shards: 2, weight: 1}\n"))
	f.Add([]byte("prefix: p\nlanes:\n  - {name: a, staleness_bound: 1m, sla: 2m, retention: 1h}\nqueue_urls:\n  p-a-dlq: http://127.0.0.1:4566/000000000000/p-a-dlq\n"))
	f.Add([]byte("lanes:\n  - {name: a, drain_rate: .nan, high_water_mark: 10}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(topo.Lanes) == 0 || topo.MaxReceiveCount < 1 {
			t.Fatalf("accepted %+v", topo)
		}
		seen := map[string]bool{}
		for _, l := range topo.Lanes {
			if seen[l.Name] || l.Shards < 1 || l.ShardChoices < 1 || l.ShardChoices > l.Shards || l.Weight < 1 || l.Weight > MaxWeight ||
				math.IsNaN(l.Capacity) || math.IsInf(l.Capacity, 0) || l.Capacity <= 0 || l.DeprecatedDrainRate != 0 || l.HighWaterMark < 1 ||
				time.Duration(l.VisibilityTimeout) < time.Second || time.Duration(l.VisibilityTimeout) > queue.MaxVisibilityTimeout {
				t.Fatalf("accepted lane %+v", l)
			}
			seen[l.Name] = true
		}
		for _, q := range topo.Queues() {
			if n := len(q.Spec.Name); n == 0 || n > maxQueueNameLen || !nameRE.MatchString(q.Spec.Name) {
				t.Fatalf("accepted queue name %q", q.Spec.Name)
			}
		}
	})
}
