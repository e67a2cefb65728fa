package tenant

import (
	"fmt"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
tiers:
  free: {submit_rate: 5}
tenants:
  - id: acme
    tier: premium
    api_key_sha256: [` + HashKey("acme-secret-1") + `]
  - id: tiny
    tier: free
    api_keys: [tiny-secret-1]
    max_in_flight: 2
`))
	if err != nil {
		t.Fatal(err)
	}
	acme, ok := cfg.Authenticate("acme-secret-1")
	if !ok || acme.ID != "acme" || acme.Limits != DefaultTiers()["premium"] {
		t.Fatalf("acme = %+v, %v", acme, ok)
	}
	tiny, ok := cfg.Authenticate("tiny-secret-1")
	if !ok {
		t.Fatal("tiny not found by key")
	}
	want := DefaultTiers()["free"]
	want.SubmitRate = 5  // tier override
	want.MaxInFlight = 2 // tenant override
	if tiny.Limits != want {
		t.Errorf("tiny limits = %+v, want %+v", tiny.Limits, want)
	}
	if _, ok := cfg.Authenticate("acme-secret-2"); ok {
		t.Error("unknown key authenticated")
	}
	if got := cfg.Lanes(); strings.Join(got, ",") != "free,premium" {
		t.Errorf("lanes = %v", got)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", "tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh]\n    rate: 3\n", "line 5"},
		{"unknown tier", "tenants:\n  - id: a\n    tier: gold\n    api_keys: [abcdefgh]\n", `line 2: tenant "a": unknown tier "gold"`},
		{"no key", "tenants:\n  - id: a\n    tier: free\n", "line 2: tenant \"a\": no api_keys"},
		{"short key", "tenants:\n  - id: a\n    tier: free\n    api_keys: [abc]\n", "shorter than 8"},
		// Never usable: a bearer token is trimmed, and the client refuses white space.
		{"key of spaces", "tenants:\n  - id: a\n    tier: free\n    api_keys: [\"        \"]\n", "api key with white space"},
		{"padded key", "tenants:\n  - id: a\n    tier: free\n    api_keys: [\"  dave-key-1  \"]\n", "api key with white space"},
		{"key with a tab", "tenants:\n  - id: a\n    tier: free\n    api_keys: [\"dave\\tkey-1\"]\n", "api key with white space"},
		{"bad hash", "tenants:\n  - id: a\n    tier: free\n    api_key_sha256: [zz]\n", "64 hex digits"},
		{"shared key", "tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh]\n  - id: b\n    tier: free\n    api_keys: [abcdefgh]\n", `line 5: tenant "b": api key already belongs to tenant "a"`},
		{"duplicate id", "tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh]\n  - id: a\n    tier: free\n    api_keys: [abcdefgi]\n", "line 5: tenant \"a\": duplicate"},
		{"bad id", "tenants:\n  - id: 'a b'\n    tier: free\n    api_keys: [abcdefgh]\n", "id must be"},
		{"bad fraction", "tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh]\n    hwm_fraction: 1.5\n", "hwm_fraction"},
		{"payload ceiling", "tiers:\n  free: {max_payload_bytes: 1000000}\n", "tier free: max_payload_bytes"},
		{"not yaml", "tenants: [", "yaml"},
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

// TestUnknownTierIsOneError: a tenant whose tier is missing or unknown
// gets one error saying so, not also "lane is empty", "submit_rate must
// be positive" and the rest, which its limits only lack for want of a
// tier.
func TestUnknownTierIsOneError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, want string
	}{
		{"no tier", "tenants:\n  - id: a\n    api_keys: [abcdefgh]\n", `line 2: tenant "a": no tier: write tier: one of [free premium standard]`},
		{"unknown tier", "tenants:\n  - id: a\n    tier: gold\n    api_keys: [abcdefgh]\n", `line 2: tenant "a": unknown tier "gold" (known: [free premium standard])`},
		{"unknown tier, no key", "tenants:\n  - id: a\n    tier: gold\n", "line 2: tenant \"a\": unknown tier \"gold\" (known: [free premium standard])\nline 2: tenant \"a\": no api_keys or api_key_sha256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want exactly %q", err, tt.want)
			}
		})
	}
}

// TestSyntaxErrorNamesItsLine: yaml.v3 reports a key indented between an
// entry's keys and its "- " at the line where the list starts: line 1 of
// a 1,800-line file for a mistake on line 1,354. The error must name the
// line of the mistake, whether it is near the top or deep in a file read
// in chunks.
func TestSyntaxErrorNamesItsLine(t *testing.T) {
	t.Parallel()
	var long strings.Builder
	long.WriteString("tenants:\n")
	for i := range 600 {
		fmt.Fprintf(&long, "  - id: t%d\n    tier: free\n    api_keys: [key-%08d]\n", i, i)
	}
	long.WriteString("  - id: late\n    tier: free\n   api_keys: [key-late-1]\n")
	tests := []struct {
		name, yaml, want string
	}{
		{"near the top", "tenants:\n  - id: a\n    tier: free\n   api_keys: [abcdefgh]\n", "yaml: line 4: did not find expected '-' indicator"},
		{"deep in a long file", long.String(), "yaml: line 1804: did not find expected '-' indicator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want exactly %q", err, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh]\n"))
	f.Add([]byte("tiers:\n  free: {submit_rate: 5}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		for _, tn := range cfg.Tenants() {
			if p := tn.Limits.validate(); len(p) > 0 {
				t.Fatalf("accepted tenant %q with invalid limits: %v", tn.ID, p)
			}
		}
	})
}

// TestTypeErrorsLeaveOutTheValue: a plain key written where a list
// belongs is not echoed by the error (yaml quotes up to ten characters of
// a value, and a refused reload is logged), while the line and the types
// still say what to fix.
func TestTypeErrorsLeaveOutTheValue(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"k3y-9f2c4e", "sk_live_9f2c4e1a7b3d"} {
		for _, doc := range []string{
			"tenants:\n  - id: a\n    tier: free\n    api_keys: " + key + "\n",
			"tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh]\nworkers:\n  - name: w\n    api_keys: " + key + "\n",
		} {
			_, err := Parse([]byte(doc))
			if err == nil || strings.Contains(err.Error(), key[:7]) || !strings.Contains(err.Error(), "line") || !strings.Contains(err.Error(), "[]string") {
				t.Errorf("key %q written as a scalar: %v; want an error naming the line and the type, not the key", key, err)
			}
		}
	}
}

// TestQuotedLinesAreNotTheTenantList: a quoted string whose lines read
// like a tenant list is part of a string, as a YAML reader of the whole
// file sees it, not the list: the fast path gave such a file a tenant
// whose key authenticated (found in review).
func TestQuotedLinesAreNotTheTenantList(t *testing.T) {
	t.Parallel()
	doc := "workers:\n  - name: pool\n    api_keys: [\"pool-key-1\ntenants:\n  - id: ghost\n    tier: free\n    api_keys: [ghost-key-1]\n\"]\n"
	// Read whole, the worker's key is one string with the tenant lines
	// folded into it, refused for its white space: no tenant.
	const refused = `worker "pool": api key with white space`
	if whole, err := parseWhole([]byte(doc)); err == nil || !strings.Contains(err.Error(), refused) {
		t.Fatalf("the whole document: %v, %v; want it refused for the worker key's white space", whole, err)
	}
	c, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), refused) {
		t.Fatalf("Parse: %v, want the whole document's error", err)
	}
	if c != nil {
		t.Errorf("%d tenants; want none, as in the whole document", c.Len())
	}
}
