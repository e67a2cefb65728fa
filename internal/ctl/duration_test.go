package ctl_test

import (
	"strings"
	"testing"
)

// TestDurationFlagsSayWhatToWrite: every duration flag of every command
// (those --help lists as "duration") refuses a number without a unit by
// saying what to write. They said "parse error": sluicectl submit --ttl 5
// and --ttl 15d left the unit to be guessed (found in a walkthrough).
func TestDurationFlagsSayWhatToWrite(t *testing.T) {
	tests := []struct {
		command string
		flags   []string // the duration flags --help must list
	}{
		{"submit", []string{"ttl", "delay", "timeout"}},
		{"stats", []string{"timeout"}},
		{"limits", []string{"timeout"}},
		{"top", []string{"interval", "timeout"}},
		{"dlq list", []string{"timeout"}},
		{"dlq replay", []string{"timeout"}},
		{"worker", []string{"work"}},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			cmd := strings.Fields(tt.command)
			help, err := run(t, append(cmd, "--help")...)
			if err != nil {
				t.Fatalf("--help: %v", err)
			}
			listed := durationFlags(help)
			for _, f := range tt.flags {
				if !strings.Contains(help, "\n  -"+f+" duration\n") {
					t.Errorf("--help does not list -%s as a duration:\n%s", f, help)
				}
			}
			for _, f := range listed {
				for value, want := range map[string]string{
					"5":   `invalid value "5" for flag -` + f + `: want a duration such as 30s, 1m30s or 2h (a number needs a unit)`,
					"15d": "15d is 360h",
				} {
					_, err := run(t, append(cmd, "--"+f, value)...)
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("--%s %s: %v, want an error saying %q", f, value, err, want)
					}
				}
			}
		})
	}
}

// durationFlags lists the flags a --help output shows as durations.
func durationFlags(help string) []string {
	var out []string
	for line := range strings.Lines(help) {
		if name, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "  -"); ok {
			if name, ok = strings.CutSuffix(name, " duration"); ok {
				out = append(out, name)
			}
		}
	}
	return out
}
