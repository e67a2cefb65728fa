package node

import (
	"flag"
	"io"
	"testing"

	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/sideliner"
)

// TestSidelineFlag checks --sideline (not parallel: it sets the
// environment).
func TestSidelineFlag(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    string // SLUICE_SIDELINE, if not empty
		wantOn bool
	}{
		{"default on", nil, "", true},
		{"bare flag", []string{"--sideline"}, "", true},
		{"off", []string{"--sideline=false"}, "", false},
		{"off, then on", []string{"--sideline=false", "--sideline=true"}, "", true},
		{"off by environment", nil, "false", false},
		{"flag beats environment", []string{"--sideline=true"}, "false", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("SLUICE_SIDELINE", tt.env)
			}
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var p sideliner.Policy
			var share int
			PolicyFlags(fs, &p, &share, new(int))
			fs.String("config", "", "")
			if err := flagconf.Parse(fs, tt.args, "SLUICE", "config"); err != nil {
				t.Fatal(err)
			}
			if on := !p.NoSideline; on != tt.wantOn {
				t.Errorf("sidelining on = %v, want %v", on, tt.wantOn)
			}
		})
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var p sideliner.Policy
	var share int
	PolicyFlags(fs, &p, &share, new(int))
	if err := fs.Parse([]string{"--sideline=maybe"}); err == nil {
		t.Error("--sideline=maybe parsed, want an error")
	}
}
