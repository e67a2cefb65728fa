package ctl_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/depth"
	"github.com/sluice-dev/sluice/gateway"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/faultqueue"
	"github.com/sluice-dev/sluice/internal/ingestcheck"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

// serveGateway starts the real gateway on 127.0.0.1 over the embedded
// store, wrapped so that a test can fail its calls, with one tenant whose
// key is "sk_test_key_1"; it returns the address and the fault wrapper.
func serveGateway(t *testing.T) (string, *faultqueue.Backend) {
	t.Helper()
	topo := topology.Default()
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "q.db"), embeddedqueue.Options{Logger: topotest.QuietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.EnsureQueues(t.Context(), topo.Specs()); err != nil {
		t.Fatal(err)
	}
	tenants, err := tenant.Parse([]byte("tenants:\n  - {id: acme, tier: premium, api_keys: [sk_test_key_1]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	depths := depth.New(depth.Config{Backend: b, Queues: topo.Names(), Logger: topotest.QuietLog})
	if err := depths.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	fq := faultqueue.New(b)
	gw, err := gateway.New(gateway.Config{
		Backend: fq, Topology: topo, Depth: depths, Logger: topotest.QuietLog,
		Tenants: func() *tenant.Config { return tenants },
	})
	if err != nil {
		t.Fatal(err)
	}
	auth := func() gateway.Authenticator { return tenants }
	srv := serve.NewServer(topotest.QuietLog, []grpc.UnaryServerInterceptor{gateway.UnaryAuth(auth)}, []grpc.StreamServerInterceptor{gateway.StreamAuth(auth)},
		grpc.InTapHandle(gateway.TapAuth(auth, nil)))
	ingestv1.RegisterIngestServiceServer(srv.GRPC, gw)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, lis, 0); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String(), fq
}

// TestSubmitTellsRefusalFromUnreachable: a gateway whose store fails
// answers UNAVAILABLE; sluicectl submit says the gateway did not store the
// job, and why, instead of "cannot reach the gateway … is --addr right?",
// which it says only when nothing answers at the address.
func TestSubmitTellsRefusalFromUnreachable(t *testing.T) {
	t.Parallel()
	addr, fq := serveGateway(t)
	if out, err := run(t, "submit", "--addr", addr, "--key", "sk_test_key_1", "hello"); err != nil {
		t.Fatalf("submit with the store working: %v: %s", err, out)
	}
	fq.Sleep(faultqueue.OpSend)
	_, err := run(t, "submit", "--addr", addr, "--key", "sk_test_key_1", "hello")
	if err == nil || !strings.Contains(err.Error(), "the gateway at "+addr+" did not store the job") ||
		!strings.Contains(err.Error(), "backend unavailable") || strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("submit with the store failing: %v, want that the gateway did not store the job, and why", err)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := closed.Addr().String()
	closed.Close()
	if _, err := run(t, "submit", "--addr", nowhere, "--key", "sk_test_key_1", "--timeout", "2s", "hello"); err == nil || !strings.Contains(err.Error(), "cannot reach the gateway at "+nowhere) {
		t.Errorf("submit to a closed port: %v, want that the gateway cannot be reached", err)
	}
}

// TestSubmitRefusesOversizePayload: a payload over what any tenant may
// send is refused before it is sent, naming the field and the ceiling,
// as the Go client refuses it; it went out whole.
func TestSubmitRefusesOversizePayload(t *testing.T) {
	t.Parallel()
	// No gateway: the refusal comes before any dial.
	_, err := run(t, "submit", "--addr", "127.0.0.1:1", "--key", "sk_test_key_1", strings.Repeat("x", ingestcheck.MaxPayloadBytes+1))
	want := fmt.Sprintf("job not sent: field payload: is %d bytes, over the most any tenant may send, %d", ingestcheck.MaxPayloadBytes+1, ingestcheck.MaxPayloadBytes)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("submit of a %d-byte payload: %v, want an error saying %q", ingestcheck.MaxPayloadBytes+1, err, want)
	}
}

// TestSubmitRefusesInvalidUTF8: a job whose attribute or idempotency key
// is not UTF-8 cannot be encoded; sluicectl submit refuses it before
// sending, naming the field. Sent, it failed with "Internal: grpc: error
// while marshaling: string field contains invalid UTF-8", naming nothing
// (found in a walkthrough).
func TestSubmitRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	addr, _ := serveGateway(t)
	tests := []struct {
		name string
		args []string
		want string // "" when the job is accepted
	}{
		{"attribute value", []string{"--attr", "k=\xff"}, `job not sent: field attributes["k"]: value is not valid UTF-8 (--attr and --idempotency-key take UTF-8 text`},
		{"attribute key", []string{"--attr", "k\xfe=v"}, `field attributes: key "k\xfe" is not valid UTF-8`},
		{"idempotency key", []string{"--idempotency-key", "order-\xc3"}, `field idempotency_key: "order-\xc3" is not valid UTF-8`},
		{"both", []string{"--attr", "k=\xff", "--idempotency-key", "\xc3"}, `field attributes["k"]: value is not valid UTF-8; field idempotency_key`},
		{"UTF-8 text", []string{"--attr", "k=é", "--idempotency-key", "ключ"}, ""},
		{"binary payload", []string{"--attr", "k=v"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"submit", "--addr", addr, "--key", "sk_test_key_1"}, tt.args...)
			out, err := run(t, append(args, "payload \xff")...)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("submit %q: %v, want it accepted", tt.args, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "Internal")):
				t.Errorf("submit %q: %v (output %q), want an error saying %q", tt.args, err, out, tt.want)
			}
		})
	}
}
