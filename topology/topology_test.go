package topology

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestQueueName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind  Kind
		index int
		want  string
	}{
		{KindShard, 0, "sluice-premium-shard-00"},
		{KindShard, 7, "sluice-premium-shard-07"},
		{KindShard, 123, "sluice-premium-shard-123"},
		{KindSpillover, 5, "sluice-premium-spillover"},
		{KindBacklog, 0, "sluice-premium-backlog"},
		{KindDLQ, 0, "sluice-premium-dlq"},
	}
	for _, tt := range tests {
		if got := QueueName("sluice", "premium", tt.kind, tt.index); got != tt.want {
			t.Errorf("QueueName(%s, %d) = %q, want %q", tt.kind, tt.index, got, tt.want)
		}
	}
}

func TestDefaultTopology(t *testing.T) {
	t.Parallel()
	topo := Default()
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	qs := topo.Queues()
	// 3 lanes × (4 shards + spillover + backlog + dlq).
	if len(qs) != 21 {
		t.Fatalf("got %d queues, want 21", len(qs))
	}
	seen := map[string]bool{}
	for i, q := range qs {
		if seen[q.Spec.Name] {
			t.Errorf("duplicate queue %s", q.Spec.Name)
		}
		seen[q.Spec.Name] = true
		if q.Kind == KindDLQ {
			if q.Spec.DeadLetterQueue != "" {
				t.Errorf("%s: a DLQ must not redrive", q.Spec.Name)
			}
			continue
		}
		if q.Spec.DeadLetterQueue != topo.DLQ(q.Lane) || q.Spec.MaxReceiveCount != MaxReceiveCountDefault {
			t.Errorf("%s: redrive to %q after %d", q.Spec.Name, q.Spec.DeadLetterQueue, q.Spec.MaxReceiveCount)
		}
		if !seen[q.Spec.DeadLetterQueue] {
			t.Errorf("queue %d (%s) listed before its DLQ", i, q.Spec.Name)
		}
	}
	premium, _ := topo.Lane("premium")
	if want := int64(CapacityDefault * SLADefault.Seconds()); premium.HighWaterMark != want {
		t.Errorf("HWM = %d, want drain rate × SLA = %d", premium.HighWaterMark, want)
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		check   func(t *testing.T, topo Topology)
	}{
		{
			name: "defaults filled",
			yaml: "lanes:\n  - name: a\n    shards: 8\n    shard_choices: 3\n    visibility_timeout: 45s\n",
			check: func(t *testing.T, topo Topology) {
				l := topo.Lanes[0]
				if l.Shards != 8 || l.ShardChoices != 3 || time.Duration(l.VisibilityTimeout) != 45*time.Second || l.Weight != 1 || topo.Prefix != "sluice" {
					t.Errorf("got %+v", topo)
				}
			},
		},
		{
			name: "choices clamped to shards",
			yaml: "lanes:\n  - name: a\n    shards: 1\n    shard_choices: 3\n",
			check: func(t *testing.T, topo Topology) {
				if topo.Lanes[0].ShardChoices != 1 {
					t.Errorf("shard_choices = %d", topo.Lanes[0].ShardChoices)
				}
			},
		},
		// yaml.v3 named the Go type: "field shardz not found in type topology.Lane".
		{name: "unknown field", yaml: "lanes:\n  - name: a\n    shardz: 3\n", wantErr: `line 3: unknown lane key "shardz" (a lane's keys are name, shards, shard_choices,`},
		{name: "unknown top-level key", yaml: "prefx: x\nlanes:\n  - name: a\n", wantErr: `line 1: unknown top-level key "prefx" (the top-level keys are prefix, max_receive_count, lanes, queue_urls)`},
		// yaml.v3 said line 1.
		{name: "key indented too little", yaml: "lanes:\n  - name: a\n    shards: 2\n   weight: 3\n", wantErr: "yaml: line 4: did not find expected '-' indicator"},
		{name: "bad duration", yaml: "lanes:\n  - name: a\n    sla: soon\n", wantErr: "line 3"},
		{name: "no lanes", yaml: "prefix: x\n", wantErr: "at least one lane"},
		{name: "bad lane name", yaml: "lanes:\n  - name: Premium\n", wantErr: "lowercase"},
		{name: "duplicate lane", yaml: "lanes:\n  - name: a\n  - name: a\n", wantErr: "duplicate lane"},
		// A negative sla was taken: with a high_water_mark given it
		// passed, and without one the error blamed high_water_mark.
		{name: "negative sla", yaml: "lanes:\n  - name: a\n    sla: -5m\n    high_water_mark: 100\n", wantErr: "sla -5m0s must be positive"},
		{name: "negative sla sizing the high-water mark", yaml: "lanes:\n  - name: a\n    sla: -5m\n", wantErr: "sla -5m0s must be positive"},
		// The error named high_water_mark, which the file never set.
		{name: "capacity × sla under one job", yaml: "lanes:\n  - name: a\n    capacity: 0.1\n    sla: 5s\n", wantErr: "capacity 0.1 × sla 5s gives a high-water mark under one job"},
		{name: "visibility too short", yaml: "lanes:\n  - name: a\n    visibility_timeout: 10ms\n", wantErr: "visibility_timeout"},
		{name: "name too long", yaml: "prefix: " + strings.Repeat("p", 60) + "\nlanes:\n  - name: " + strings.Repeat("l", 20) + "\n", wantErr: "over the limit of 80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			topo, err := Parse([]byte(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, topo)
		})
	}
}

// TestCapacityAndItsOldName: a lane's capacity is read as capacity, or from
// the deprecated drain_rate with a deprecation note; both at once is an
// error.
func TestCapacityAndItsOldName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		yaml       string
		want       float64
		deprecated bool
		err        string
	}{
		{"capacity", "lanes:\n  - {name: a, capacity: 250}\n", 250, false, ""},
		{"default", "lanes:\n  - {name: a}\n", CapacityDefault, false, ""},
		{"old name", "lanes:\n  - {name: a, drain_rate: 250}\n", 250, true, ""},
		{"both", "lanes:\n  - {name: a, capacity: 250, drain_rate: 250}\n", 0, false, "give capacity only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			topo, err := Parse([]byte(tt.yaml))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			l := topo.Lanes[0]
			if l.Capacity != tt.want || l.HighWaterMark != int64(tt.want*SLADefault.Seconds()) {
				t.Fatalf("capacity %g, high-water mark %d; want %g", l.Capacity, l.HighWaterMark, tt.want)
			}
			if got := len(topo.Deprecations) == 1 && strings.Contains(topo.Deprecations[0], "rename it to capacity"); got != tt.deprecated {
				t.Fatalf("deprecations %q", topo.Deprecations)
			}
			out, err := yaml.Marshal(topo)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), "drain_rate") {
				t.Fatalf("written back with the old name:\n%s", out)
			}
		})
	}
}

// TestParseRefusesSecondDocument: a queue config of several YAML documents
// had everything after the first "---" dropped without a word, lanes
// included; it is refused, naming the second document's line.
func TestParseRefusesSecondDocument(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("lanes:\n  - name: premium\n---\nlanes:\n  - name: free\n"))
	if want := "line 4: a second YAML document"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to contain %q", err, want)
	}
	if _, err := Parse([]byte("lanes:\n  - name: premium\n...\n")); err != nil {
		t.Errorf("a document end marker: %v", err)
	}
}

// TestParseEmptyFileSaysSo: an empty queue config (say, the Terraform
// output not written yet) was refused with a bare "EOF"; the error now
// says the file is empty.
func TestParseEmptyFileSaysSo(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"", "# written by terraform\n", "\n\n"} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "the file is empty") {
			t.Errorf("%q: err = %v, want it to say the file is empty", doc, err)
		}
	}
}

// TestParseRefusesExplicitZero: a key written as 0 (or "") where the zero
// field means the default is refused, saying what to write; it became the
// default without a word (found in review): staleness_bound: 0 ran with
// 5m, weight: 0 gave the lane weight 1, high_water_mark: 0 the capacity ×
// sla mark, capacity: 0 next to a drain_rate took the drain_rate. A key
// left out, or null, still takes the default.
func TestParseRefusesExplicitZero(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string // in the error; none: accepted
		staleness  time.Duration
	}{
		{"staleness_bound 0s", "lanes:\n  - {name: a, staleness_bound: 0s}\n", []string{"lanes[0] (a): staleness_bound", "leave the key out"}, 0},
		{"staleness_bound 0", "lanes:\n  - {name: b}\n  - {name: a, staleness_bound: 0}\n", []string{"lanes[1] (a): staleness_bound"}, 0},
		{"prefix", "prefix: \"\"\nlanes:\n  - {name: a}\n", []string{`prefix ""`, "leave the key out"}, 0},
		{"max_receive_count", "max_receive_count: 0\nlanes:\n  - {name: a}\n", []string{"max_receive_count 0"}, 0},
		{"shards", "lanes:\n  - {name: a, shards: 0}\n", []string{"lanes[0] (a): shards 0"}, 0},
		{"shard_choices", "lanes:\n  - {name: a, shard_choices: 0}\n", []string{"lanes[0] (a): shard_choices 0"}, 0},
		{"weight", "lanes:\n  - {name: a, weight: 0}\n", []string{"lanes[0] (a): weight 0"}, 0},
		{"visibility_timeout", "lanes:\n  - {name: a, visibility_timeout: 0s}\n", []string{"lanes[0] (a): visibility_timeout 0s"}, 0},
		{"retention", "lanes:\n  - {name: a, retention: 0s}\n", []string{"lanes[0] (a): retention 0s"}, 0},
		{"capacity", "lanes:\n  - {name: a, capacity: 0}\n", []string{"lanes[0] (a): capacity 0"}, 0},
		{"capacity beside drain_rate", "lanes:\n  - {name: a, capacity: 0, drain_rate: 250}\n", []string{"lanes[0] (a): capacity 0"}, 0},
		{"drain_rate", "lanes:\n  - {name: a, drain_rate: 0}\n", []string{"lanes[0] (a): drain_rate 0"}, 0},
		{"sla", "lanes:\n  - {name: a, sla: 0s}\n", []string{"lanes[0] (a): sla 0s"}, 0},
		{"high_water_mark", "lanes:\n  - {name: a, high_water_mark: 0}\n", []string{"lanes[0] (a): high_water_mark 0", "capacity × sla"}, 0},
		{"every zero named", "lanes:\n  - {name: a, shards: 0, weight: 0}\n", []string{"shards 0", "weight 0"}, 0},
		{"staleness_bound left out", "lanes:\n  - {name: a}\n", nil, StalenessBoundDefault},
		{"staleness_bound null", "lanes:\n  - {name: a, staleness_bound: ~}\n", nil, StalenessBoundDefault},
		{"staleness_bound given", "lanes:\n  - {name: a, staleness_bound: 1m}\n", nil, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			topo, err := Parse([]byte(tt.yaml))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v, want it accepted", err)
				}
				if got := time.Duration(topo.Lanes[0].StalenessBound); got != tt.staleness {
					t.Fatalf("staleness_bound %s, want %s", got, tt.staleness)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("Parse: %v, want an error containing %q", err, w)
				}
			}
		})
	}
}

// TestHugeCapacitySaturatesTheHighWaterMark: capacity × sla past int64
// gives the largest mark. Converted as it was, it wrapped negative and
// the file was refused for a high_water_mark it never set.
func TestHugeCapacitySaturatesTheHighWaterMark(t *testing.T) {
	t.Parallel()
	topo, err := Parse([]byte("lanes:\n  - name: a\n    capacity: 1e17\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := topo.Lanes[0].HighWaterMark; got != math.MaxInt64 {
		t.Fatalf("high-water mark %d, want %d", got, int64(math.MaxInt64))
	}
}

// TestWithRetiredShards: shard queues past a lane's Shards that hold jobs
// are kept, up to the last of them, for the drainers and the high-water
// mark; other names change nothing, and the receiver is not modified.
func TestWithRetiredShards(t *testing.T) {
	t.Parallel()
	topo := Default()
	std, _ := topo.Lane("standard")
	tests := []struct {
		name     string
		nonEmpty []string
		want     int // standard's RetiredShards
	}{
		{"none", nil, 0},
		{"a shard in use", []string{topo.ShardQueue("standard", 0)}, 0},
		{"the first past the count", []string{topo.ShardQueue("standard", std.Shards)}, 1},
		{"up to the last held", []string{topo.ShardQueue("standard", std.Shards+5), topo.ShardQueue("standard", std.Shards+1)}, 6},
		{"another lane's or prefix's", []string{topo.ShardQueue("premium", std.Shards+3), "other-standard-shard-09", topo.SpilloverQueue("standard")}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := topo.WithRetiredShards(tt.nonEmpty)
			l, _ := got.Lane("standard")
			if l.RetiredShards != tt.want {
				t.Fatalf("RetiredShards %d, want %d", l.RetiredShards, tt.want)
			}
			if l.Shards != std.Shards {
				t.Errorf("Shards %d, want %d unchanged", l.Shards, std.Shards)
			}
			names := got.Names()
			for i := range std.Shards + tt.want {
				if !slices.Contains(names, topo.ShardQueue("standard", i)) {
					t.Errorf("Names lacks %s", topo.ShardQueue("standard", i))
				}
			}
			if slices.Contains(names, topo.ShardQueue("standard", std.Shards+tt.want)) {
				t.Errorf("Names has %s, past the last retired shard", topo.ShardQueue("standard", std.Shards+tt.want))
			}
			for _, q := range got.Queues() {
				lane, _ := got.Lane(q.Lane)
				if q.Retired != (q.Kind == KindShard && q.Shard >= lane.Shards) {
					t.Errorf("%s: Retired %v", q.Spec.Name, q.Retired)
				}
			}
			if orig, _ := topo.Lane("standard"); orig.RetiredShards != 0 {
				t.Error("WithRetiredShards changed its receiver")
			}
		})
	}
}
