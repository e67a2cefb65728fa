package node

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadTopologyLogsDeprecatedKeys: a queue config naming a lane's
// capacity by its old key, drain_rate, loads with one warning that says
// what to rename; one using capacity loads silently.
func TestLoadTopologyLogsDeprecatedKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, wantLog string
	}{
		{"old key", "lanes:\n  - {name: std, drain_rate: 50}\n", "lane std: drain_rate is deprecated: rename it to capacity"},
		{"new key", "lanes:\n  - {name: std, capacity: 50}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "queues.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			topo, err := LoadTopology(path, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if topo.Lanes[0].Capacity != 50 {
				t.Fatalf("capacity %g, want 50", topo.Lanes[0].Capacity)
			}
			if got := logs.String(); tt.wantLog == "" && got != "" || !strings.Contains(got, tt.wantLog) || strings.Count(got, "\n") > 1 {
				t.Fatalf("log %q, want one line with %q", got, tt.wantLog)
			}
		})
	}
}
