package main

import (
	"context"
	"strings"
	"testing"
)

// TestAddressesFromEnvironment: the worker pulls from SLUICE_PULL_ADDR and
// serves the push API on SLUICE_PUSH_LISTEN. It read SLUICE_WORKER_ADDR
// and SLUICE_WORKER_LISTEN, which the gateway reads as --worker-addr (the
// push worker's address) and --worker-listen (where pull workers connect):
// the same names for the other address each, so an environment shared
// with the gateway pointed one of them at the wrong place (found in
// review). The old names alone are still read, with a warning naming the
// new one. (Not parallel: it sets the environment.)
func TestAddressesFromEnvironment(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // in the output
		not  string   // not in the output
	}{
		{
			"pull",
			map[string]string{"SLUICE_PULL_ADDR": "127.0.0.1:7301", "SLUICE_WORKER_ADDR": "127.0.0.1:7302"},
			[]string{"pulling jobs from 127.0.0.1:7301"},
			"SLUICE_WORKER_ADDR",
		},
		{
			"pull, old name",
			map[string]string{"SLUICE_WORKER_ADDR": "127.0.0.1:7302"},
			[]string{"pulling jobs from 127.0.0.1:7302", "set SLUICE_PULL_ADDR"},
			"",
		},
		{
			"push",
			map[string]string{"SLUICE_PUSH_LISTEN": "127.0.0.1:0", "SLUICE_WORKER_LISTEN": "127.0.0.1:7303"},
			[]string{"worker listening on 127.0.0.1:0"},
			"SLUICE_WORKER_LISTEN",
		},
		{
			"push, old name",
			map[string]string{"SLUICE_WORKER_LISTEN": "127.0.0.1:0"},
			[]string{"worker listening on 127.0.0.1:0", "set SLUICE_PUSH_LISTEN"},
			"",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"SLUICE_PULL_ADDR", "SLUICE_WORKER_ADDR", "SLUICE_PUSH_LISTEN", "SLUICE_WORKER_LISTEN"} {
				t.Setenv(k, tt.env[k])
			}
			ctx, cancel := context.WithCancel(t.Context())
			cancel() // print where it would work, then stop
			var out strings.Builder
			_ = run(ctx, []string{"--key", "k"}, &out)
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if tt.not != "" && strings.Contains(out.String(), tt.not) {
				t.Errorf("output mentions %s:\n%s", tt.not, out.String())
			}
		})
	}
}
