package node

import (
	"strings"
	"testing"
	"time"
)

// TestTargetValidate: a webhook secret with no webhook URL is refused,
// naming both flags; it was ignored, and the process served pull workers.
func TestTargetValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		give Target
		want string // "" for no error
	}{
		{"pull", Target{HandlerTimeout: time.Minute}, ""},
		{"webhook with secret", Target{WebhookURL: "http://127.0.0.1:9/jobs", WebhookSecret: "s", HandlerTimeout: time.Minute}, ""},
		{"secret alone", Target{WebhookSecret: "s", HandlerTimeout: time.Minute}, "--webhook-url"},
		{"secret with a gRPC worker", Target{WorkerAddr: "127.0.0.1:9", WebhookSecret: "s", HandlerTimeout: time.Minute}, "--webhook-url"},
		{"zero handler timeout", Target{}, "--handler-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.give.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
