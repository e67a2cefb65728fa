package tenant

import (
	"strconv"
	"strings"
	"testing"
)

const workerTenants = `
tenants:
  - id: acme
    tier: standard
    api_keys: [acme-key-1]
`

func TestWorkers(t *testing.T) {
	cfg, err := Parse([]byte(workerTenants + `
workers:
  - name: pool
    api_keys: [worker-key-1]
    lanes: [premium]
  - name: all
    api_key_sha256: [` + HashKey("worker-key-2") + `]
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key, name string
		ok        bool
		premium   bool
		free      bool
	}{
		{"worker-key-1", "pool", true, true, false},
		{"worker-key-2", "all", true, true, true},
		{"acme-key-1", "", false, false, false}, // a tenant key is not a worker key
		{"nope-nope-nope", "", false, false, false},
	}
	for _, tc := range tests {
		w, ok := cfg.AuthenticateWorker(tc.key)
		if ok != tc.ok {
			t.Fatalf("%s: ok %v, want %v", tc.key, ok, tc.ok)
		}
		if !ok {
			continue
		}
		if w.Name != tc.name || w.Serves("premium") != tc.premium || w.Serves("free") != tc.free {
			t.Errorf("%s: got %s serving premium %v free %v", tc.key, w.Name, w.Serves("premium"), w.Serves("free"))
		}
	}
	if _, ok := cfg.Authenticate("worker-key-1"); ok {
		t.Error("a worker key authenticated as a tenant")
	}
	if len(cfg.Workers()) != 2 {
		t.Errorf("Workers() = %d, want 2", len(cfg.Workers()))
	}
}

func TestWorkerErrors(t *testing.T) {
	tests := []struct{ name, workers, want string }{
		{"tenant key", "  - name: w\n    api_keys: [acme-key-1]\n", `belongs to tenant "acme"`},
		{"no keys", "  - name: w\n", "no api_keys"},
		{"bad name", "  - name: 'a b'\n    api_keys: [worker-key-1]\n", "name must be"},
		{"duplicate", "  - name: w\n    api_keys: [worker-key-1]\n  - name: w\n    api_keys: [worker-key-2]\n", "duplicate worker name"},
		{"shared key", "  - name: w\n    api_keys: [worker-key-1]\n  - name: v\n    api_keys: [worker-key-1]\n", `already belongs to worker "w"`},
		{"short key", "  - name: w\n    api_keys: [short]\n", "shorter than 8"},
		{"padded key", "  - name: w\n    api_keys: [\" worker-key-1\"]\n", "api key with white space"},
		{"bad hash", "  - name: w\n    api_key_sha256: [worker-key-1]\n", "not 64 hex digits"},
		{"unknown field", "  - name: w\n    api_keys: [worker-key-1]\n    tier: free\n", `unknown worker field "tier"`},
		{"bad lane", "  - name: w\n    api_keys: [worker-key-1]\n    lanes: ['x y']\n", "is not a lane name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(workerTenants + "workers:\n" + tc.workers))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The chunked reader of big files sees the workers list too.
func TestWorkersInLargeFile(t *testing.T) {
	var b strings.Builder
	b.WriteString("workers:\n  - name: pool\n    api_keys: [worker-key-1]\ntenants:\n")
	for i := range 2000 {
		b.WriteString("  - id: t" + strconv.Itoa(i) + "\n    tier: free\n    api_keys: [key-of-t" + strconv.Itoa(i) + "]\n")
	}
	path := t.TempDir() + "/tenants.yaml"
	writeFile(t, path, b.String())
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := cfg.AuthenticateWorker("worker-key-1"); !ok || w.Name != "pool" {
		t.Fatalf("worker key not found in a large file: %v %v", w, ok)
	}
	if cfg.Len() != 2000 {
		t.Fatalf("%d tenants", cfg.Len())
	}
}
