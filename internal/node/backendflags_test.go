package node

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/topology"
)

// TestOpenBackendRefusesSQSFlagsOnEmbedded: SQS settings without
// --backend sqs are refused, naming them, as --fsync is with SQS. They
// were ignored: an operator who set SLUICE_SQS_ENDPOINT or --aws-region
// and forgot --backend sqs ran a gateway that stored every job on its
// local disk, in ./data, while the SQS queues stayed empty.
func TestOpenBackendRefusesSQSFlagsOnEmbedded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		f    BackendFlags
		want string
	}{
		{"endpoint", BackendFlags{SQSEndpoint: "http://127.0.0.1:4566"}, "--sqs-endpoint"},
		{"region", BackendFlags{Region: "eu-west-1"}, "--aws-region"},
		{"create queues", BackendFlags{CreateQueues: true}, "--create-queues"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := tt.f
			f.Kind, f.DataDir = "embedded", filepath.Join(t.TempDir(), "data")
			b, err := OpenBackend(t.Context(), f, topology.Default(), slog.New(slog.DiscardHandler))
			if err == nil {
				_ = b.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "--backend sqs") {
				t.Fatalf("OpenBackend: %v, want an error naming %s and --backend sqs", err, tt.want)
			}
		})
	}
}

// TestOpenBackendSQSWithoutARegion: --backend sqs with no region anywhere
// is refused in the flags' words (it said "set Config.Region", a field of
// the Go API).
func TestOpenBackendSQSWithoutARegion(t *testing.T) {
	withoutAWSRegion(t)
	_, err := OpenBackend(t.Context(), BackendFlags{Kind: "sqs"}, topology.Default(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "give --aws-region, or set AWS_REGION") || strings.Contains(err.Error(), "Config.Region") {
		t.Fatalf("OpenBackend = %v, want a refusal naming --aws-region and AWS_REGION", err)
	}
}
