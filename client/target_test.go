package client_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/client"
)

// TestNewChecksTheAddress: New refuses an address gRPC's dns resolver
// cannot parse. It accepted "not a target:::", and every call failed
// UNAVAILABLE, retried for 10 s, with "too many colons in address"
// (found by a tester).
func TestNewChecksTheAddress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target string
		ok     bool
	}{
		{"127.0.0.1:7070", true},
		{"localhost", true}, // port 443
		{"[::1]:7070", true},
		{"dns:///gateway.internal:7070", true},
		{"dns://8.8.8.8/gateway.internal:7070", true},
		{"unix:///tmp/sluice.sock", true},
		{"not a target:::", false},
		{"dns:///a:b:c", false},
		{"[::1", false},
		{"gateway.internal:", false},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			t.Parallel()
			c, err := client.New(tc.target, client.Config{APIKey: "test-key", Insecure: true})
			if err == nil {
				c.Close()
			}
			if (err == nil) != tc.ok {
				t.Fatalf("New(%q): %v, want accepted %t", tc.target, err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), "give host:port") {
				t.Errorf("New(%q): %v; want it to say what to give", tc.target, err)
			}
		})
	}
}
