package tenant

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// chunkedCases are files in layouts the chunked parser must read exactly
// as a whole decode does, or leave to it.
var chunkedCases = []struct {
	name      string
	yaml      string
	chunked   bool // the chunked parser takes the file
	wantError string
}{
	{"usual layout", "tenants:\n  - id: a\n    tier: free\n    api_keys: [key-of-a-1]\n  - id: b\n    tier: premium\n    api_keys: [key-of-b-1]\n", true, ""},
	{"tiers after the list", "# tenants\ntenants:  # the list\n\n  - {id: a, tier: free, api_keys: [key-of-a-1]}\n  # comment\n  - id: b\n    tier: free\n    api_keys:\n      - key-of-b-1\ntiers:\n  free: {lane: premium, submit_rate: 9}\n", true, ""},
	{"entries at column 0", "tenants:\n- id: a\n  tier: free\n  api_keys: [key-of-a-1]\n- id: b\n  tier: free\n  api_keys: [key-of-b-1]\n", true, ""},
	{"block scalar key", "tenants:\n  - id: a\n    tier: free\n    api_keys:\n      - |-\n        key-of-a-1\n", true, ""},
	{
		"error line numbers", "tiers:\n  free: {submit_rate: 5}\ntenants:\n  - id: a\n    tier: free\n    api_keys: [key-of-a-1]\n  - id: a\n    tier: nope\n    api_keys: [short]\n", true,
		`line 7: tenant "a": duplicate tenant id`,
	},
	{"tier error in the skeleton", "tiers:\n  free: {submit_rate: -1}\ntenants:\n  - id: a\n    tier: free\n    api_keys: [key-of-a-1]\n", true, "line 2: tier free: submit_rate must be positive"},
	{"plain values by hand", "tenants:\n  - id: a.b_c-1\n    tier: free\n    lane: premium\n    api_key_sha256: [" + HashKey("key-of-a-1") + ", " + HashKey("key-of-a-2") + "]\n    submit_rate: 2.5\n    hwm_fraction: 0.25\n    drain_rate: 3\n    max_drain_rate: 0\n    submit_burst: 7\n    max_in_flight: 3\n", true, ""},
	{"null id left to yaml", "tenants:\n  - id: null\n    tier: free\n    api_keys: [key-of-a-1]\n", true, "id must be"},
	{"numbers yaml reads its own way", "tenants:\n  - id: a\n    tier: free\n    api_keys: [key-of-a-1]\n    submit_burst: 0x10\n    submit_rate: 1e1\n    max_in_flight: 010\n", true, ""},
	{"a key twice", "tenants:\n  - id: a\n    tier: free\n    tier: premium\n    api_keys: [key-of-a-1]\n", false, "already defined"},
	{"empty and quoted lists", "tenants:\n  - id: a\n    tier: free\n    api_keys: []\n  - id: b\n    tier: free\n    api_keys: [\"key-of-b-1\", 'key-of-b-2']\n", true, "no api_keys"},
	{"numeric id", "tenants:\n  - id: 12\n    tier: free\n    api_keys: [key-of-a-1]\n", true, ""},
	{"unknown field falls back", "tenants:\n  - id: a\n    tier: free\n    colour: red\n    api_keys: [key-of-a-1]\n", false, `line 4: unknown tenant field "colour"`},
	{"wrong type falls back", "tenants:\n  - id: a\n    tier: free\n    submit_rate: fast\n    api_keys: [key-of-a-1]\n", false, "cannot unmarshal"},
	{"aliases fall back", "tenants:\n  - &x {id: a, tier: free, api_keys: [key-of-a-1]}\n  - *x\n", false, "duplicate tenant id"},
	{"flow list falls back", "tenants: [{id: a, tier: free, api_keys: [key-of-a-1]}]\n", false, ""},
	// Only the first document was read: the tenants after a "---" were
	// dropped without a word (found in review).
	{"two documents are refused", "tenants:\n  - {id: a, tier: free, api_keys: [key-of-a-1]}\n---\ntenants:\n  - {id: b, tier: free, api_keys: [key-of-b-1]}\n", false, "line 4: a second YAML document"},
	{"a document end marker is fine", "tenants:\n  - {id: a, tier: free, api_keys: [key-of-a-1]}\n...\n", false, ""},
	{"unknown top-level field", "tenants:\n  - {id: a, tier: free, api_keys: [key-of-a-1]}\nteenants: []\n", false, "field teenants not found"},
	// Folded, the key is "key-of-a-1 - x": refused for its white space.
	{"quoted string cut at a dash line", "tenants:\n  - id: a\n    tier: free\n    api_keys: [\"key-of-a-1\n  - x\"]\n", false, "api key with white space"},
}

// sameConfig reports how two configs differ, or "".
func sameConfig(a, b *Config) string {
	if !maps.Equal(a.tiers, b.tiers) {
		return fmt.Sprintf("tiers %v and %v", a.tiers, b.tiers)
	}
	ta, tb := a.Tenants(), b.Tenants()
	if !slices.EqualFunc(ta, tb, func(x, y *Tenant) bool { return *x == *y }) {
		return fmt.Sprintf("tenants %v and %v", ta, tb)
	}
	if len(a.byKey) != len(b.byKey) {
		return fmt.Sprintf("%d keys and %d", len(a.byKey), len(b.byKey))
	}
	for k, t := range a.byKey {
		if u := b.byKey[k]; u == nil || u.ID != t.ID {
			return fmt.Sprintf("key %x: %v and %v", k, t, u)
		}
	}
	return ""
}

// checkChunked compares the chunked parse of data, if it takes the file,
// with the whole decode, and reports whether it took it.
func checkChunked(t *testing.T, data []byte) bool {
	t.Helper()
	r := bytes.NewReader(data)
	sp, sum, ok, err := splitTenants(r)
	if err != nil || !ok {
		return false
	}
	if sum != digest(data) {
		t.Fatalf("digest %s, want %s", sum, digest(data))
	}
	cc, ok, cerr := parseChunks(r, sp)
	if !ok {
		return false
	}
	wc, werr := parseWhole(data)
	switch {
	case (cerr == nil) != (werr == nil):
		t.Fatalf("chunked error %v, whole-file error %v", cerr, werr)
	case cerr != nil && cerr.Error() != werr.Error():
		t.Fatalf("chunked error\n%v\nwhole-file error\n%v", cerr, werr)
	case cerr == nil:
		if d := sameConfig(cc, wc); d != "" {
			t.Fatalf("chunked and whole-file configs differ: %s", d)
		}
	}
	return true
}

func TestParseChunked(t *testing.T) {
	t.Parallel()
	for _, tt := range chunkedCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if took := checkChunked(t, []byte(tt.yaml)); took != tt.chunked {
				t.Errorf("chunked parser took the file: %t, want %t", took, tt.chunked)
			}
			data := []byte(tt.yaml)
			if cfg, sum, err := parseFrom(bytes.NewReader(data), digest(data)); cfg != nil || err != nil || sum != digest(data) {
				t.Fatalf("unchanged file: config %v, digest %s, error %v; want nothing parsed", cfg, sum, err)
			}
			if _, sum, _ := parseFrom(bytes.NewReader(data), ""); sum != digest(data) {
				t.Fatalf("digest %s, want %s", sum, digest(data))
			}
			_, err := Parse(data)
			switch {
			case tt.wantError == "" && err != nil:
				t.Fatal(err)
			case tt.wantError != "" && (err == nil || !strings.Contains(err.Error(), tt.wantError)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantError)
			}
		})
	}
	t.Run("many chunks", func(t *testing.T) {
		t.Parallel()
		if !checkChunked(t, largeFile(3*chunkTenants+7)) {
			t.Fatal("the harness's layout was not read in chunks")
		}
	})
}

// FuzzParseChunked checks that whenever the chunked parser takes a file,
// it gives exactly the whole decode's config or error.
func FuzzParseChunked(f *testing.F) {
	for _, tt := range chunkedCases {
		f.Add([]byte(tt.yaml))
	}
	f.Add(largeFile(3))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkChunked(t, data)
	})
}
