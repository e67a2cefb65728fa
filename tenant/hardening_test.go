package tenant

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestParseRefusesCorruptValues covers values a YAML file can hold that a
// limit must not: NaN and infinities pass a plain "> 0" check. Each error
// names the line.
func TestParseRefusesCorruptValues(t *testing.T) {
	t.Parallel()
	tenant := func(field string) string {
		return "tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh]\n    " + field + "\n"
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"NaN submit rate", tenant("submit_rate: .nan"), "line 2: tenant \"a\": submit_rate"},
		{"infinite submit rate", tenant("submit_rate: .inf"), "line 2: tenant \"a\": submit_rate"},
		{"NaN drain rate", tenant("drain_rate: .NaN"), "line 2: tenant \"a\": drain_rate"},
		{"negative infinite drain rate", tenant("drain_rate: -.inf"), "drain_rate"},
		{"NaN fraction", tenant("hwm_fraction: .nan"), "line 2: tenant \"a\": hwm_fraction"},
		{"tier error has its line", "tenants: []\ntiers:\n  premium:\n    lane: premium\n  free: {submit_rate: .nan}\n", "line 5: tier free: submit_rate"},
		{"unknown tier field", "tiers:\n  free:\n    submit_rat: 5\n", "line 3: unknown tier field \"submit_rat\""},
		{"new tier without a lane", "tiers:\n  gold: {submit_rate: 5}\n", "line 2: tier gold: lane is empty"},
		{"tier of the wrong type", "tiers:\n  free: 5\n", "line 2"},
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

// TestErrorsNeverEchoKeys puts a plain key where a hash belongs, the
// commonest slip: the error names the entry, not the key (errors are
// logged on every reload).
func TestErrorsNeverEchoKeys(t *testing.T) {
	t.Parallel()
	const key = "sk_live_9f2c4e1a7b3d"
	_, err := Parse([]byte("tenants:\n  - id: a\n    tier: free\n    api_key_sha256: [" + key + "]\n"))
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "api_key_sha256[0]") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzErrorsNeverEchoKeys builds tenant entries around an arbitrary key
// in either key field, with an arbitrary tier and limit: whatever is
// wrong, the error does not contain the key, and an accepted entry
// authenticates with it (api_keys) and has finite limits.
func FuzzErrorsNeverEchoKeys(f *testing.F) {
	f.Add("tenant-a-key-1", "free", 0, 5.0)
	f.Add("short", "premium", 1, math.NaN())
	f.Add("sk_live_9f2c4e1a7b3d", "gold", 1, 1.0)
	f.Add("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "standard", 1, -1.0)
	f.Fuzz(func(t *testing.T, key, tier string, field int, rate float64) {
		fields := []string{"api_keys", "api_key_sha256"}
		doc := fmt.Sprintf("tenants:\n  - id: a\n    tier: %q\n    %s: [%q]\n    submit_rate: %v\n", tier, fields[field&1], key, rate)
		cfg, err := Parse([]byte(doc))
		if err != nil {
			if len(key) >= 12 && !strings.Contains(tier, key) && !strings.Contains(fmt.Sprint(rate), key) && strings.Contains(err.Error(), key) {
				t.Fatalf("error echoes the key %q: %v", key, err)
			}
			return
		}
		for _, tn := range cfg.Tenants() {
			l := tn.Limits
			for _, v := range []float64{l.SubmitRate, l.DrainRate, l.HWMFraction} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
					t.Fatalf("accepted %+v", l)
				}
			}
		}
	})
}
