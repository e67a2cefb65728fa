package tenant

import (
	"strings"
	"testing"
)

// TestExplicitZeroIsNotInheritance: a limit written as 0 means what the
// README says 0 means, not the tier's value. A tenant's max_in_flight: 0,
// max_drain_rate: 0 or min_share: 0 (documented as "no ceiling", "none")
// kept its tier's ceiling or share, and submit_rate: 0, written to stop a
// tenant, gave it the tier's rate (1000/s on premium). Now the ceilings
// and shares are lifted, and a zero where a positive value is required
// is refused with its line. A key left out, or left empty (null), still
// inherits. Each file is checked in the hand-decoded layout and in flow
// style, which yaml decodes.
func TestExplicitZeroIsNotInheritance(t *testing.T) {
	t.Parallel()
	for name := range limitFields {
		if limitBits[name] == 0 {
			t.Fatalf("limit %s has no bit in limitBits", name)
		}
	}
	const tiers = "tiers:\n  standard: {max_in_flight: 8, min_share: 0.2, max_drain_rate: 50, weight: 4}\n"
	type entry struct{ block, flow string }
	tests := []struct {
		name      string
		fields    []string // "key: value"
		want      func(Limits) bool
		wantError string
	}{
		{"left out inherits", nil, func(l Limits) bool {
			return l.MaxInFlight == 8 && l.MinShare == 0.2 && l.MaxDrainRate == 50 && l.Weight == 4
		}, ""},
		{"zero lifts the ceilings", []string{"max_in_flight: 0", "max_drain_rate: 0", "min_share: 0", "weight: 0"}, func(l Limits) bool {
			return l.MaxInFlight == 0 && l.MinShare == 0 && l.MaxDrainRate == 0 && l.Weight == 0
		}, ""},
		{"null inherits", []string{"max_in_flight: null"}, func(l Limits) bool { return l.MaxInFlight == 8 }, ""},
		{"zero submit rate", []string{"submit_rate: 0"}, nil, `line 4: tenant "a": submit_rate must be positive`},
		{"zero submit burst", []string{"submit_burst: 0"}, nil, "submit_burst must be at least 1"},
		{"zero fraction", []string{"hwm_fraction: 0.0"}, nil, "hwm_fraction must be in (0, 1]"},
		{"zero payload", []string{"max_payload_bytes: 0"}, nil, "max_payload_bytes must be 1 to"},
	}
	for _, tt := range tests {
		block := tiers + "tenants:\n  - id: a\n    tier: standard\n    api_keys: [key-of-a-1]\n"
		flow := tiers + "tenants:\n  - {id: a, tier: standard, api_keys: [key-of-a-1]"
		for _, f := range tt.fields {
			block += "    " + f + "\n"
			flow += ", " + f
		}
		flow += "}\n"
		for _, doc := range []entry{{block, "block"}, {flow, "flow"}} {
			t.Run(tt.name+"/"+doc.flow, func(t *testing.T) {
				t.Parallel()
				cfg, err := Parse([]byte(doc.block))
				if tt.wantError != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantError) {
						t.Fatalf("err = %v, want it to contain %q", err, tt.wantError)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				a, _ := cfg.Tenant("a")
				if !tt.want(a.Limits) {
					t.Errorf("limits %+v", a.Limits)
				}
				checkChunked(t, []byte(doc.block))
			})
		}
	}
	// In a tier too: a zero submit_rate is refused, not the built-in's.
	if _, err := Parse([]byte("tiers:\n  free: {submit_rate: 0}\n")); err == nil || !strings.Contains(err.Error(), "line 2: tier free: submit_rate must be positive") {
		t.Errorf("tier submit_rate 0: %v, want it refused", err)
	}
}
