package ctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/internal/admintest"
	"github.com/sluice-dev/sluice/internal/ctl"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// faulty wraps a backend: Send to any queue but the DLQ fails, and
// Receive fails when failReceive is set.
type faulty struct {
	queue.Backend
	dlq         string
	failReceive bool
	endless     bool // the DLQ yields fresh messages for ever
	stall       bool // Receive from the DLQ waits until its context ends
	n           int
}

func (f *faulty) Send(ctx context.Context, p *queue.SendParams) ([]queue.SendResult, error) {
	if p.Queue != f.dlq {
		return nil, fmt.Errorf("%w: disk full", queue.ErrUnavailable)
	}
	return f.Backend.Send(ctx, p)
}

func (f *faulty) Receive(ctx context.Context, p *queue.ReceiveParams) ([]queue.Message, error) {
	if f.failReceive {
		return nil, fmt.Errorf("%w: throttled", queue.ErrUnavailable)
	}
	if f.stall && p.Queue == f.dlq {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.endless && p.Queue == f.dlq {
		body, _ := envelope.Encode(topotest.Envelope("x", "j", time.Now()))
		out := make([]queue.Message, p.Max)
		for i := range out {
			f.n++
			out[i] = queue.Message{MessageID: fmt.Sprint(f.n), ReceiptHandle: fmt.Sprint(f.n), Body: body, ReceiveCount: 1}
		}
		return out, nil
	}
	return f.Backend.Receive(ctx, p)
}

func (f *faulty) ChangeVisibility(ctx context.Context, p *queue.ChangeVisibilityParams) ([]error, error) {
	if f.endless {
		return make([]error, len(p.Changes)), nil
	}
	return f.Backend.ChangeVisibility(ctx, p)
}

func serveAdmin(t *testing.T, b queue.Backend, tb *topotest.Bundle) string {
	t.Helper()
	return admintest.Serve(t, b, tb.Topo, "k")
}

func run(t *testing.T, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	err := ctl.Run(t.Context(), args, &out, &errOut)
	return out.String() + errOut.String(), err
}

// The admin commands against a real admin server on loopback over the
// embedded store, with faults where a test needs them. Each of these
// exited 0, or blamed the connection, before (found in review).

// TestReplayThatMovedNothingFails: every job fails to move (the shard
// queue refuses the send); `sluicectl dlq replay` follows it to its end,
// prints the table, and exits with an error naming what was not moved.
func TestReplayThatMovedNothingFails(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.Envelope("a", "a-1", time.Now()), topotest.Envelope("a", "a-2", time.Now()))
	addr := serveAdmin(t, &faulty{Backend: tb.Backend, dlq: tb.Topo.DLQ("std")}, tb)
	out, err := run(t, "dlq", "replay", "--all-tenants", "--rate", "1000", "--admin-addr", addr, "--admin-key", "k")
	if err == nil || !strings.Contains(err.Error(), "could not move 2 of 2") || !strings.Contains(out, "FAILED") {
		t.Errorf("dlq replay with every move failing: err=%v, want one naming 2 of 2 jobs not moved; output:\n%s", err, out)
	}
}

// TestDryRunThatFailedFails: the DLQ cannot be read; the dry run ends
// FAILED and the CLI says so and exits with an error.
func TestDryRunThatFailedFails(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.Envelope("a", "a-1", time.Now()))
	addr := serveAdmin(t, &faulty{Backend: tb.Backend, dlq: tb.Topo.DLQ("std"), failReceive: true}, tb)
	out, err := run(t, "dlq", "replay", "--all-tenants", "--dry-run", "--admin-addr", addr, "--admin-key", "k")
	if err == nil || !strings.Contains(err.Error(), "failed") || strings.Contains(out, "would be replayed") {
		t.Errorf("dry run on an unreadable DLQ: err=%v, want a failure; output:\n%s", err, out)
	}
}

// TestScanLimitAsksToNarrowTheFilter: a listing that reaches the scan
// bound asks for a narrower filter (FAILED_PRECONDITION); as UNAVAILABLE
// the CLI told the operator it could not reach the admin API.
func TestScanLimitAsksToNarrowTheFilter(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	addr := serveAdmin(t, &faulty{Backend: tb.Backend, dlq: tb.Topo.DLQ("std"), endless: true}, tb)
	out, err := run(t, "dlq", "list", "--tenant", "nobody", "--admin-addr", addr, "--admin-key", "k")
	if err == nil || strings.Contains(err.Error(), "cannot reach the admin API") || !strings.Contains(err.Error(), "narrow the filter") {
		t.Errorf("dlq list over a huge DLQ: err=%v, want one asking to narrow the filter; output:\n%s", err, out)
	}
}

// TestDryRunThatFailedFailsWithJSON: with --json a dry run that ended
// FAILED printed its JSON and exited 0, so a script that reads --json
// took the failed preview for an empty one. The JSON is still printed
// (valid, with the state), and the command exits with the error.
func TestDryRunThatFailedFailsWithJSON(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.Envelope("a", "a-1", time.Now()))
	addr := serveAdmin(t, &faulty{Backend: tb.Backend, dlq: tb.Topo.DLQ("std"), failReceive: true}, tb)
	var out, errOut bytes.Buffer
	err := ctl.Run(t.Context(), []string{"dlq", "replay", "--all-tenants", "--dry-run", "--json", "--admin-addr", addr, "--admin-key", "k"}, &out, &errOut)
	var r struct{ State string }
	if jerr := json.Unmarshal(out.Bytes(), &r); jerr != nil || r.State != "STATE_FAILED" {
		t.Errorf("stdout is not the failed replay's JSON (%v):\n%s", jerr, out.String())
	}
	if err == nil || !strings.Contains(err.Error(), "failed") {
		t.Errorf("dry run --json on an unreadable DLQ: err=%v, want a failure", err)
	}
}

// TestTopWithoutDrainersSaysSo: top against an admin API whose process
// drains nothing (an SQS front door) got UNAVAILABLE from the API itself
// and blamed the connection ("cannot reach the admin API … is
// --admin-addr right?"). It must say that no drainer runs there.
func TestTopWithoutDrainersSaysSo(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	addr := serveAdmin(t, tb.Backend, tb)
	out, err := run(t, "top", "--once", "--admin-addr", addr, "--admin-key", "k")
	if err == nil || strings.Contains(err.Error(), "cannot reach") || !strings.Contains(err.Error(), "no drainer runs") {
		t.Errorf("top on a process without drainers: err=%v, want one saying no drainer runs there; output:\n%s", err, out)
	}
	// An address where nothing listens still blames the connection.
	lis, lerr := net.Listen("tcp", "127.0.0.1:0")
	if lerr != nil {
		t.Fatal(lerr)
	}
	dead := lis.Addr().String()
	_ = lis.Close()
	if _, err := run(t, "top", "--once", "--timeout", "5s", "--admin-addr", dead, "--admin-key", "k"); err == nil || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("top with nothing listening: err=%v, want cannot reach", err)
	}
}

// TestTimeoutSaysWhichFlag: a call that outlives --timeout (a dry run
// over a slow DLQ) failed with "DeadlineExceeded: context deadline
// exceeded", naming neither the flag nor that the server may still be
// at it.
func TestTimeoutSaysWhichFlag(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	addr := serveAdmin(t, &faulty{Backend: tb.Backend, dlq: tb.Topo.DLQ("std"), stall: true}, tb)
	for _, args := range [][]string{
		{"dlq", "replay", "--all-tenants", "--dry-run"},
		{"dlq", "list"},
	} {
		out, err := run(t, append(args, "--timeout", "300ms", "--admin-addr", addr, "--admin-key", "k")...)
		if err == nil || !strings.Contains(err.Error(), "--timeout") {
			t.Errorf("%q past its --timeout: err=%v, want one naming --timeout; output:\n%s", args, err, out)
		}
	}
}

// TestReplayOfNothingSaysNothingMatched: a replay whose filter matched no
// job drew "0/1 moved", as if one job had not moved. It must show 0 of 0.
func TestReplayOfNothingSaysNothingMatched(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.Envelope("a", "a-1", time.Now()))
	addr := serveAdmin(t, tb.Backend, tb)
	out, err := run(t, "dlq", "replay", "--tenant", "b", "--admin-addr", addr, "--admin-key", "k")
	if err != nil || !strings.Contains(out, "0/0 moved") || strings.Contains(out, "0/1") {
		t.Errorf("replay matching nothing: err=%v, want progress 0/0 moved; output:\n%s", err, out)
	}
}

// TestAdminKeyFileProblemsAreNamed: an admin-key file that exists but
// cannot be read, or is empty, got "run where <dir>/admin-key exists",
// which it does. The error must say what is wrong with the file.
func TestAdminKeyFileProblemsAreNamed(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_KEY", "")
	for _, tc := range []struct {
		name, want string
		make       func(dir string) error
	}{
		{"a directory", "is a directory", func(dir string) error { return os.Mkdir(filepath.Join(dir, "admin-key"), 0o700) }},
		{"empty", "is empty", func(dir string) error { return os.WriteFile(filepath.Join(dir, "admin-key"), []byte("\n"), 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.make(dir); err != nil {
				t.Fatal(err)
			}
			_, err := run(t, "stats", "--data-dir", dir, "--admin-addr", "127.0.0.1:1")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("admin-key %s: err=%v, want it to say %q", tc.name, err, tc.want)
			}
		})
	}
}

// TestKeysFromEnvironmentAreNotPrinted: the admin, tenant and worker keys
// set in the environment were the key flags' defaults, so --help and every
// mistyped flag printed them. They must not appear, and must still be used.
func TestKeysFromEnvironmentAreNotPrinted(t *testing.T) {
	secrets := map[string]string{
		"SLUICE_ADMIN_KEY":  "admin-secret-5f1e",
		"SLUICE_API_KEY":    "tenant-secret-8a2c",
		"SLUICE_WORKER_KEY": "worker-secret-3d7b",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for _, cmd := range [][]string{{"stats"}, {"dlq", "replay"}, {"submit"}, {"worker"}} {
		for _, extra := range []string{"--help", "--no-such-flag"} {
			out, _ := run(t, append(cmd, extra)...)
			for _, v := range secrets {
				if strings.Contains(out, v) {
					t.Errorf("sluicectl %s %s printed the key %q from the environment:\n%s", strings.Join(cmd, " "), extra, v, out)
				}
			}
		}
	}

	// The keys from the environment are still the ones used.
	tb := topotest.Setup(t, topotest.OneLane)
	t.Setenv("SLUICE_ADMIN_KEY", "k")
	if out, err := run(t, "stats", "--admin-addr", serveAdmin(t, tb.Backend, tb)); err != nil {
		t.Errorf("stats with SLUICE_ADMIN_KEY: %v\n%s", err, out)
	}
	if _, err := run(t, "submit", "--addr", "127.0.0.1:1", "--timeout", "100ms", "x"); err == nil || strings.Contains(err.Error(), "no API key") {
		t.Errorf("submit with SLUICE_API_KEY: %v, want a failure to reach the gateway, not a missing key", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := ctl.Run(ctx, []string{"worker", "--addr", "127.0.0.1:1", "--key-file", filepath.Join(t.TempDir(), "none")}, io.Discard, io.Discard)
	if err != nil && strings.Contains(err.Error(), "no worker key") {
		t.Errorf("worker with SLUICE_WORKER_KEY: %v, want the key from the environment used", err)
	}
}

// TestTLSMismatchSaysSo: plaintext to a TLS server, or TLS to a plaintext
// one, failed with "is it running, and is --addr right?" and gRPC's
// "error reading server preface: EOF", which names neither TLS nor a
// flag. The error must say which flags to add or leave out.
func TestTLSMismatchSaysSo(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	serverTLS, err := tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	serveGRPC := func(opts ...grpc.ServerOption) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(opts...)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		return lis.Addr().String()
	}
	tlsAddr := serveGRPC(grpc.Creds(credentials.NewTLS(serverTLS)))
	plainAddr := serveGRPC()
	mutualTLS, err := tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: pki.CA}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	mtlsAddr := serveGRPC(grpc.Creds(credentials.NewTLS(mutualTLS)))
	other := tlstest.New(t) // a client certificate of a CA the server does not know
	// Expired certificates, of a CA the server takes: the client's (its
	// alert often lost to "write: broken pipe", and the hint sent the
	// user to the server's CA) and the server's (found by a tester).
	expired := tlstest.NewUntil(t, time.Now().Add(-time.Hour))
	takesExpired, err := tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, ClientCAFile: expired.CA}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	takesExpiredAddr := serveGRPC(grpc.Creds(credentials.NewTLS(takesExpired)))
	expiredServer, err := tlsflags.Server{CertFile: expired.ServerCert, KeyFile: expired.ServerKey}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	expiredAddr := serveGRPC(grpc.Creds(credentials.NewTLS(expiredServer)))
	expiredClient := []string{"--tls-ca", pki.CA, "--tls-cert", expired.ClientCert, "--tls-key", expired.ClientKey}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"stats in plaintext to TLS", []string{"stats", "--admin-addr", tlsAddr, "--admin-key", "k"}, "add --tls-ca"},
		{"submit in plaintext to TLS", []string{"submit", "--addr", tlsAddr, "--key", "k", "x"}, "add --tls-ca"},
		{"stats over TLS to plaintext", []string{"stats", "--admin-addr", plainAddr, "--admin-key", "k", "--tls-ca", pki.CA}, "leave out the --tls flags"},
		{"submit over TLS to plaintext", []string{"submit", "--addr", plainAddr, "--key", "k", "--tls-ca", pki.CA, "x"}, "leave out the --tls flags"},
		{"stats without a client certificate to mutual TLS", []string{"stats", "--admin-addr", mtlsAddr, "--admin-key", "k", "--tls-ca", pki.CA}, "add --tls-cert and --tls-key"},
		{"submit without a client certificate to mutual TLS", []string{"submit", "--addr", mtlsAddr, "--key", "k", "--tls-ca", pki.CA, "x"}, "add --tls-cert and --tls-key"},
		{"stats with an untrusted client certificate to mutual TLS", []string{"stats", "--admin-addr", mtlsAddr, "--admin-key", "k", "--tls-ca", pki.CA, "--tls-cert", other.ClientCert, "--tls-key", other.ClientKey}, "--tls-client-ca"},
		{"submit with an expired client certificate", append([]string{"submit", "--addr", takesExpiredAddr, "--key", "k", "x"}, expiredClient...), "--tls-cert CN=sluice-test-client expired at"},
		{"stats with an expired client certificate", append([]string{"stats", "--admin-addr", takesExpiredAddr, "--admin-key", "k"}, expiredClient...), "--tls-cert CN=sluice-test-client expired at"},
		{"submit to an expired server certificate", []string{"submit", "--addr", expiredAddr, "--key", "k", "--tls-ca", expired.CA, "x"}, "its certificate (its --tls-cert) has expired or is not yet valid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := run(t, append(tt.args, "--timeout", "5s")...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err=%v, want it to say %q", err, tt.want)
			}
		})
	}
}

// TestListPreviewZeroShowsNoPayload: --preview 0 is allowed ("payload
// bytes to show (0-4096)"), but the API reads preview_bytes 0 as its
// default of 64, so `dlq list --preview 0` printed the first 64 bytes of
// every payload, the ones an operator asked not to see.
func TestListPreviewZeroShowsNoPayload(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	env := topotest.Envelope("a", "a-1", time.Now())
	env.Payload = []byte("card=4111111111111111")
	tb.Enqueue(t, tb.Topo.DLQ("std"), env)
	addr := serveAdmin(t, tb.Backend, tb)
	for _, extra := range [][]string{nil, {"--json"}} {
		out, err := run(t, append([]string{"dlq", "list", "--preview", "0", "--admin-addr", addr, "--admin-key", "k"}, extra...)...)
		if err != nil || !strings.Contains(out, "a-1") || strings.Contains(out, "4111") || strings.Contains(out, "Y2FyZD0") {
			t.Errorf("dlq list --preview 0 %q: err=%v, want the job listed without its payload; output:\n%s", extra, err, out)
		}
	}
}

// TestBulkyDeadLettersCanBeRead: dead letters with the attributes and
// payload the gateway allows made a page of 500 (what dlq show reads, and
// what --limit allows) about 10 MB, past gRPC's default 4 MiB a client
// takes: dlq show failed with RESOURCE_EXHAUSTED "received message larger
// than max", so such a job could not be looked at. A page now ends
// early, with a token for the next.
func TestBulkyDeadLettersCanBeRead(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.BulkyEnvelopes("a", 500)...)
	addr := serveAdmin(t, tb.Backend, tb)
	out, err := run(t, "dlq", "show", "a-499", "--admin-addr", addr, "--admin-key", "k")
	if err != nil || !strings.Contains(out, "attr-15") {
		t.Errorf("dlq show of a bulky dead letter: err=%v; output:\n%.2000s", err, out)
	}
	out, err = run(t, "dlq", "list", "--limit", "500", "--preview", "4096", "--admin-addr", addr, "--admin-key", "k")
	if err != nil || !strings.Contains(out, "a-000") || !strings.Contains(out, "more: the same command with --page") {
		t.Errorf("dlq list --limit 500 --preview 4096 of bulky dead letters: err=%v; output:\n%.2000s", err, out)
	}
}

// TestListShowsNoTimeForAMalformedJob: a DLQ message that is not an
// envelope has no acceptance time, and dlq list printed the zero
// timestamp's, 1970-01-01T00:00:00Z, as when it was accepted.
func TestListShowsNoTimeForAMalformedJob(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	if _, err := tb.Backend.Send(t.Context(), &queue.SendParams{Queue: tb.Topo.DLQ("std"), Entries: []queue.SendEntry{{ID: "0", Body: []byte("not an envelope")}}}); err != nil {
		t.Fatal(err)
	}
	addr := serveAdmin(t, tb.Backend, tb)
	out, err := run(t, "dlq", "list", "--admin-addr", addr, "--admin-key", "k")
	if err != nil || !strings.Contains(out, "malformed_envelope") || strings.Contains(out, "1970") {
		t.Errorf("dlq list of a malformed dead letter: err=%v, want it listed with no acceptance time; output:\n%s", err, out)
	}
}

// TestBackendFailureIsNotUnreachable: an admin API whose queue backend
// fails answers UNAVAILABLE; the CLI says so, and why, instead of "cannot
// reach the admin API … is --admin-addr right?", which it keeps for an
// address where nothing answers.
func TestBackendFailureIsNotUnreachable(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	addr := serveAdmin(t, &faulty{Backend: tb.Backend, dlq: tb.Topo.DLQ("std"), failReceive: true}, tb)
	for _, args := range [][]string{{"dlq", "list", "--all-tenants"}, {"dlq", "show", "j-1"}} {
		_, err := run(t, append(args, "--admin-addr", addr, "--admin-key", "k")...)
		if err == nil || !strings.Contains(err.Error(), "the admin API at "+addr+" could not do it now") || !strings.Contains(err.Error(), "throttled") {
			t.Errorf("%v with the DLQ unreadable: %v, want that the admin API could not do it, and why", args, err)
		}
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := closed.Addr().String()
	closed.Close()
	if _, err := run(t, "stats", "--admin-addr", nowhere, "--admin-key", "k", "--timeout", "2s"); err == nil || !strings.Contains(err.Error(), "cannot reach the admin API at "+nowhere) {
		t.Errorf("stats with nothing at the address: %v, want that the admin API cannot be reached", err)
	}
}

// TestDryRunSaysWhatCannotBeReplayed: two good jobs and one malformed
// body; the dry run says 2 would be replayed and 1 cannot (it counted 3
// as replayable, while the replay fails the malformed one).
func TestDryRunSaysWhatCannotBeReplayed(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	dlq := tb.Topo.DLQ("std")
	tb.Enqueue(t, dlq, topotest.Envelope("a", "a-1", time.Now()), topotest.Envelope("a", "a-2", time.Now()))
	if _, err := tb.Backend.Send(t.Context(), &queue.SendParams{Queue: dlq, Entries: []queue.SendEntry{{ID: "0", Body: []byte("not an envelope")}}}); err != nil {
		t.Fatal(err)
	}
	addr := serveAdmin(t, tb.Backend, tb)
	out, err := run(t, "dlq", "replay", "--all-tenants", "--dry-run", "--admin-addr", addr, "--admin-key", "k")
	if err != nil || !strings.Contains(out, "2 of 3 dead-lettered jobs would be replayed") || !strings.Contains(out, "1 more match but cannot be replayed (malformed envelopes") {
		t.Errorf("dry run: err=%v; output:\n%s", err, out)
	}
}

// TestCappedDryRunSaysHowManyMatch: a dry run with --max 3 over 7
// matching jobs said "3 of 3 dead-lettered jobs would be replayed": it
// stops scanning at its third match, and the 3 scanned read as the whole
// DLQ. It says the max, and that at least 3 match; under its max, and
// without one, it says how many of the DLQ's jobs match.
func TestCappedDryRunSaysHowManyMatch(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	for i := range 7 {
		tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.Envelope("dev", fmt.Sprintf("dev-%d", i), time.Now()))
	}
	addr := serveAdmin(t, tb.Backend, tb)
	for _, tc := range []struct {
		max, want string
	}{
		{"3", "dry run: 3 would be replayed (--max 3; at least 3 match: the dry run stopped at the cap, after scanning 3 dead-lettered jobs)"},
		{"10", "dry run: 7 of 7 dead-lettered jobs would be replayed"},
		{"0", "dry run: 7 of 7 dead-lettered jobs would be replayed"},
	} {
		out, err := run(t, "dlq", "replay", "--tenant", "dev", "--dry-run", "--max", tc.max, "--admin-addr", addr, "--admin-key", "k")
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("dry run --max %s: err=%v; want %q in the output:\n%s", tc.max, err, tc.want, out)
		}
	}
}
