// Package flagconftest checks a command's duration flags (flagconf.DurationVar)
// from the outside, as a user meets them: listed by --help, and refusing
// a bad value by saying what to write.
package flagconftest

import (
	"strings"
	"testing"
)

// DurationFlags lists the flags a --help output shows as durations.
func DurationFlags(help string) []string {
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

// CheckBadDurations gives each flag a number with no unit and a count of
// days, through try (which runs the command with --flag value), and fails
// t unless each error says what to write.
func CheckBadDurations(t *testing.T, flags []string, try func(flag, value string) error) {
	t.Helper()
	for _, f := range flags {
		for _, tt := range []struct{ value, want string }{
			{"5", `invalid value "5" for flag -` + f + `: want a duration such as 30s, 1m30s or 2h (a number needs a unit)`},
			{"15d", "15d is 360h"},
		} {
			if err := try(f, tt.value); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("--%s %s: %v, want an error saying %q", f, tt.value, err, tt.want)
			}
		}
	}
}
