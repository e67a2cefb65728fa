package ctl_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/flagconf/flagconftest"
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
			listed := flagconftest.DurationFlags(help)
			for _, f := range tt.flags {
				if !strings.Contains(help, "\n  -"+f+" duration\n") {
					t.Errorf("--help does not list -%s as a duration:\n%s", f, help)
				}
			}
			flagconftest.CheckBadDurations(t, listed, func(f, value string) error {
				_, err := run(t, append(cmd, "--"+f, value)...)
				return err
			})
		})
	}
}
