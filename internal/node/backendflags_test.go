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

// TestLingerFlags: each linger flag keeps the convention of the field it
// feeds, so that "auto" and "0" mean what they say: --sqs-send-linger
// that of sqsqueue.Config.Linger (zero: the default, negative: none),
// --receive-linger that of drainer.Config.ReceiveLinger (negative: the
// backend's default, zero: none); and a send linger past MaxSendLinger is
// refused before any call to SQS.
func TestLingerFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		flag string
		arg  string
		want time.Duration
		read string // the flag's value read back
		err  bool
	}{
		{"sqs-send-linger", "auto", 0, "auto", false},
		{"sqs-send-linger", "0", -1, "0", false},
		{"sqs-send-linger", "0s", -1, "0", false},
		{"sqs-send-linger", "20ms", 20 * time.Millisecond, "20ms", false},
		{"sqs-send-linger", "-5ms", 0, "", true},
		{"sqs-send-linger", "soon", 0, "", true},
		{"receive-linger", "auto", -1, "auto", false},
		{"receive-linger", "0", 0, "0", false},
		{"receive-linger", "50ms", 50 * time.Millisecond, "50ms", false},
		{"receive-linger", "-1s", -1, "", true},
	} {
		var f BackendFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f.Register(fs)
		err := fs.Parse([]string{"--" + tt.flag, tt.arg})
		if (err != nil) != tt.err {
			t.Fatalf("--%s %s: error %v, want error %v", tt.flag, tt.arg, err, tt.err)
		}
		if err != nil {
			continue
		}
		got := map[string]time.Duration{"sqs-send-linger": f.SendLinger, "receive-linger": f.ReceiveLinger}[tt.flag]
		if got != tt.want {
			t.Errorf("--%s %s = %v, want %v", tt.flag, tt.arg, got, tt.want)
		}
		if read := fs.Lookup(tt.flag).Value.String(); read != tt.read {
			t.Errorf("--%s %s reads back as %q, want %q", tt.flag, tt.arg, read, tt.read)
		}
	}
	_, err := OpenBackend(t.Context(), BackendFlags{Kind: "sqs", Region: "eu-west-1", SQSEndpoint: "http://127.0.0.1:1", SendLinger: 2 * time.Second}, topology.Default(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--sqs-send-linger 2s: at most 1s") {
		t.Fatalf("OpenBackend with a 2s send linger = %v, want a refusal naming the bound", err)
	}
}
