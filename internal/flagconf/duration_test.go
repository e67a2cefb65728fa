package flagconf

import (
	"flag"
	"strings"
	"testing"
	"time"
)

// TestDurationSaysWhatToWrite: a duration flag's bad value says what to
// write, on the command line as from the environment or the file. The
// flag package's own said "parse error": --retry-base 2 and --ttl 15d
// left the unit to be guessed (found in a walkthrough).
func TestDurationSaysWhatToWrite(t *testing.T) {
	tests := []struct {
		value string
		want  time.Duration
		err   string // "" when the value is taken
	}{
		{"1m30s", 90 * time.Second, ""},
		{"0", 0, ""},
		{"-1s", -time.Second, ""}, // as the flag package: the flag's owner checks the range
		{"2", 0, "want a duration such as 30s, 1m30s or 2h (a number needs a unit)"},
		{"2.5", 0, "(a number needs a unit)"},
		{"15d", 0, "want a duration such as 30s, 1m30s or 2h (the largest unit is h: 15d is 360h)"},
		{"1.5d", 0, "1.5d is 36h"},
		{"5min", 0, "want a duration such as 30s, 1m30s or 2h"},
		{"", 0, "want a duration such as 30s"},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			for _, from := range []string{"command line", "environment", "file"} {
				fs := flag.NewFlagSet("t", flag.ContinueOnError)
				grace := Duration(fs, "grace", time.Second, "")
				fs.String("config", "", "")
				var err error
				switch from {
				case "command line":
					err = Parse(fs, []string{"--grace", tt.value}, "TEST", "config")
				case "environment":
					t.Setenv("TEST_GRACE", tt.value)
					err = Parse(fs, nil, "TEST", "config")
				default:
					err = applyYAML(fs, "c.yaml", []byte("grace: "+tt.value+"\n"), "config", map[string]bool{})
				}
				if tt.err == "" {
					if err != nil || *grace != tt.want {
						t.Errorf("%s %q: %s, %v; want %s", from, tt.value, *grace, err, tt.want)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "parse error") {
					t.Errorf("%s %q: %v, want an error saying %q", from, tt.value, err, tt.err)
				}
				if *grace != time.Second {
					t.Errorf("%s %q: the flag changed to %s", from, tt.value, *grace)
				}
			}
		})
	}
}

// TestPrintDefaultsAsTheFlagPackage: flags made with DurationVar are
// listed by PrintDefaults (and Usage) exactly as the flag package lists
// its own duration flags: type "duration", the default unless zero.
func TestPrintDefaultsAsTheFlagPackage(t *testing.T) {
	tests := []struct {
		name  string
		value time.Duration
		usage string
	}{
		{"shutdown-grace", 30 * time.Second, "how long SIGTERM waits"},
		{"ttl", 0, "time to live (0: none)"},
		{"retry-cap", 15 * time.Minute, "longest retry backoff"},
		// "value" in another flag's usage is left alone.
		{"timeout", time.Second, "a value\n  -timeout value"},
	}
	var std, ours strings.Builder
	want := flag.NewFlagSet("t", flag.ContinueOnError)
	want.SetOutput(&std)
	got := flag.NewFlagSet("t", flag.ContinueOnError)
	got.SetOutput(&ours)
	for _, tt := range tests {
		want.Duration(tt.name, tt.value, tt.usage)
		Duration(got, tt.name, tt.value, tt.usage)
	}
	want.String("addr", "127.0.0.1:1", "address")
	got.String("addr", "127.0.0.1:1", "address")
	want.Usage()
	Usage(got)()
	if ours.String() != std.String() {
		t.Errorf("Usage printed\n%s\nwant, as the flag package's duration flags,\n%s", ours.String(), std.String())
	}
}
