package node

import (
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		{"send linger", BackendFlags{SendLinger: 20 * time.Millisecond}, "--sqs-send-linger"},
		{"no send linger", BackendFlags{SendLinger: -1}, "--sqs-send-linger"},
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

// TestSendLingerFlag: --sqs-send-linger keeps sqsqueue.Config.Linger's
// convention (zero: the default, negative: none), so "auto" and "0" mean
// what they say; and a linger past MaxSendLinger is refused before any
// call to SQS.
func TestSendLingerFlag(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		arg  string
		want time.Duration
		read string // the flag's value read back
		err  bool
	}{
		{"auto", 0, "auto", false},
		{"0", -1, "0", false},
		{"0s", -1, "0", false},
		{"20ms", 20 * time.Millisecond, "20ms", false},
		{"-5ms", 0, "", true},
		{"soon", 0, "", true},
	} {
		var f BackendFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs)
		err := fs.Parse([]string{"--sqs-send-linger", tt.arg})
		if (err != nil) != tt.err {
			t.Fatalf("--sqs-send-linger %s: error %v, want error %v", tt.arg, err, tt.err)
		}
		if err == nil && f.SendLinger != tt.want {
			t.Errorf("--sqs-send-linger %s = %v, want %v", tt.arg, f.SendLinger, tt.want)
		}
		if got := fs.Lookup("sqs-send-linger").Value.String(); err == nil && got != tt.read {
			t.Errorf("--sqs-send-linger %s reads back as %q, want %q", tt.arg, got, tt.read)
		}
	}
	_, err := OpenBackend(t.Context(), BackendFlags{Kind: "sqs", Region: "eu-west-1", SQSEndpoint: "http://127.0.0.1:1", SendLinger: 2 * time.Second}, topology.Default(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--sqs-send-linger 2s: at most 1s") {
		t.Fatalf("OpenBackend with a 2s send linger = %v, want a refusal naming the bound", err)
	}
}
