package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

func callCtx(t *testing.T, key string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	if key != "" {
		ctx = withKey(ctx, key)
	}
	return ctx
}

// startTLSWorker serves a recording worker over TLS with the server
// certificate of pki.
func startTLSWorker(t *testing.T, pki tlstest.Files) *worker {
	t.Helper()
	cfg, err := tlsflags.Server{CertFile: pki.ServerCert, KeyFile: pki.ServerKey}.Config("", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return startWorker(t, grpc.Creds(credentials.NewTLS(cfg)))
}

func healthy(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	resp, err := healthpb.NewHealthClient(conn).Check(callCtx(t, ""), &healthpb.HealthCheckRequest{})
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		err = fmt.Errorf("health %v", resp.GetStatus())
	}
	return err
}

// services lists the services a server offers through reflection.
func services(t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(callCtx(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// TestTLSOnBothListeners serves the ingest and admin APIs over TLS and
// delivers to a TLS worker: TLS clients (Go, sluicectl, drainer CLI) work,
// plaintext ones are refused, and health and reflection keep working.
func TestTLSOnBothListeners(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	w := startTLSWorker(t, pki)
	cl := startCluster(t, testcluster.ClusterConfig{
		Backend: testcluster.Embedded, Queues: queuesYAML, Tenants: tenantsYAML, WorkerAddr: w.Addr,
		Args: []string{"--worker-tls-ca", pki.CA, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey},
	})
	gw, addr, admin, adminKey := role(t, cl, "gateway"), cl.Addr, cl.AdminAddr, cl.AdminKey
	if l := gw.waitLog("gateway listening"); l["tls"] != "tls" {
		t.Fatalf("gateway listening: %v", l)
	}
	if l := gw.waitLog("admin API listening"); l["tls"] != "tls" {
		t.Fatalf("admin API listening: %v", l)
	}
	trusting := tlsflags.Client{CAFile: pki.CA}

	// Go client over TLS: submit, and the TLS worker gets the job.
	conn := dial(t, addr, trusting)
	resp, err := ingestv1.NewIngestServiceClient(conn).Submit(callCtx(t, "alpha-key-123"), &ingestv1.SubmitRequest{Payload: []byte("over tls")})
	if err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, []string{resp.GetJobId()})
	if err := healthy(t, conn); err != nil {
		t.Fatalf("ingest health over TLS: %v", err)
	}
	if got := strings.Join(services(t, conn), ","); !strings.Contains(got, "sluice.ingest.v1.IngestService") {
		t.Fatalf("reflection over TLS lists %s", got)
	}
	adminConn := dial(t, admin, trusting)
	if err := healthy(t, adminConn); err != nil {
		t.Fatalf("admin health over TLS: %v", err)
	}
	if _, err := adminv1.NewAdminServiceClient(adminConn).GetQueueStats(callCtx(t, adminKey), &adminv1.GetQueueStatsRequest{}); err != nil {
		t.Fatal(err)
	}

	// Plaintext clients are refused on both listeners.
	for _, a := range []string{addr, admin} {
		if err := healthy(t, dial(t, a, tlsflags.Client{})); status.Code(err) != codes.Unavailable {
			t.Errorf("plaintext health check of %s: %v, want UNAVAILABLE", a, err)
		}
	}

	// The CLIs, with and without the CA.
	out, err := cli(t, "submit", "--addr", addr, "--key", "beta-key-1234", "--tls-ca", pki.CA, "by sluicectl over tls")
	if err != nil || len(strings.TrimSpace(out)) != 26 {
		t.Fatalf("sluicectl over TLS: %v: %s", err, out)
	}
	w.waitFor(t, []string{strings.TrimSpace(out)})
	if out, err := cli(t, "submit", "--addr", addr, "--key", "beta-key-1234", "--timeout", "3s", "x"); err == nil {
		t.Fatalf("sluicectl in plaintext to a TLS gateway: %s", out)
	}
	if out, err := cli(t, "stats", "--admin-addr", admin, "--admin-key", adminKey, "--tls-ca", pki.CA); err != nil || !strings.Contains(out, "sluice-standard-dlq") {
		t.Fatalf("drainer stats over TLS: %v: %s", err, out)
	}
	if out, err := cli(t, "stats", "--admin-addr", admin, "--admin-key", adminKey, "--timeout", "3s"); err == nil || !strings.Contains(out, "cannot reach the admin API") {
		t.Fatalf("drainer stats in plaintext to a TLS admin API: %v: %s", err, out)
	}
}

// TestConsoleBesideTLSAdminAPI: with the admin API over mutual TLS the
// console needs --console-listen, and then it must work. Its in-process
// client spoke plaintext to the admin API's TLS server, so every page
// said "the admin API is unavailable: io: read/write on closed pipe" and
// the charts' samples failed every interval.
func TestConsoleBesideTLSAdminAPI(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	cl := startCluster(t, testcluster.ClusterConfig{
		Backend: testcluster.Embedded, Queues: queuesYAML, Tenants: tenantsYAML, Pull: true,
		Args: []string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CA, "--console-listen", "127.0.0.1:0"},
	})
	gw := role(t, cl, "gateway")
	console := consoleClient(t, strings.TrimSuffix(gw.waitLog("web console listening")["url"].(string), "/"), cl.AdminKey)
	if page := console("/"); !strings.Contains(page, `id="lane-standard"`) || strings.Contains(page, "unavailable") {
		t.Errorf("console overview beside a TLS admin API does not show the lanes:\n%s", page)
	}
	if page := console("/dlq"); !strings.Contains(page, "No dead-lettered jobs match") {
		t.Errorf("console DLQ page beside a TLS admin API:\n%s", page)
	}
}

// TestConsoleOverHTTPS: the gateway serves the console over HTTPS on
// --console-listen with --console-tls-cert/--console-tls-key, beside an
// admin API over TLS: the listening line says https:// and tls=tls, a
// browser trusting the CA signs in and sees the lanes, plain HTTP gets
// no page (and a log line that says so), and no "plain HTTP" warning is
// logged. The console could only
// serve plain HTTP (found in a TLS walkthrough).
func TestConsoleOverHTTPS(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	cl := startCluster(t, testcluster.ClusterConfig{
		Backend: testcluster.Embedded, Queues: queuesYAML, Tenants: tenantsYAML, Pull: true,
		Args: []string{
			"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey,
			"--console-listen", "127.0.0.1:0", "--console-tls-cert", pki.ServerCert, "--console-tls-key", pki.ServerKey,
		},
	})
	gw := role(t, cl, "gateway")
	l := gw.waitLog("web console listening")
	base, _ := l["url"].(string)
	if !strings.HasPrefix(base, "https://127.0.0.1:") || l["tls"] != "tls" {
		t.Fatalf("web console listening: %v, want an https:// URL and tls=tls", l)
	}
	base = strings.TrimSuffix(base, "/")
	cfg, err := tlsflags.Client{CAFile: pki.CA}.Config("")
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: cfg}
	t.Cleanup(tr.CloseIdleConnections)
	console := consoleClientOver(t, tr, base, cl.AdminKey)
	if page := console("/"); !strings.Contains(page, `id="lane-standard"`) || strings.Contains(page, "unavailable") {
		t.Errorf("console overview over HTTPS does not show the lanes:\n%s", page)
	}
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + strings.TrimPrefix(base, "https://") + "/login"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), `name="csrf"`) {
			t.Errorf("plain HTTP to the HTTPS console: %s\n%s\nwant a 400 and no page", resp.Status, b)
		}
	}
	if l := gw.waitLog("web console: TLS handshake refused"); !strings.Contains(fmt.Sprint(l["hint"]), "plaintext") {
		t.Errorf("refused handshake: %v, want a hint that the client speaks plaintext", l)
	}
	if gw.Find("web console serves plain HTTP while the admin API uses TLS") != nil {
		t.Error("the console over HTTPS was warned of as plain HTTP")
	}
}

// TestMutualTLS requires client certificates: tenants' CA on the ingest
// listener, an operators' CA on the admin listener (--admin-tls-*), and
// the same on a standalone drainer. A client without a certificate, or
// with one of the wrong CA, is refused at the handshake; with the right
// one it works, health included.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	tenants, ops, stranger := tlstest.New(t), tlstest.New(t), tlstest.New(t)
	cl := startCluster(t, testcluster.ClusterConfig{
		Backend: testcluster.Embedded, Queues: queuesYAML, Tenants: tenantsYAML,
		Args: []string{
			"--tls-cert", tenants.ServerCert, "--tls-key", tenants.ServerKey, "--tls-client-ca", tenants.CA,
			"--admin-tls-cert", ops.ServerCert, "--admin-tls-key", ops.ServerKey, "--admin-tls-client-ca", ops.CA,
		},
	})
	if l := role(t, cl, "gateway").waitLog("gateway listening"); l["tls"] != "mtls" {
		t.Fatalf("gateway listening: %v", l)
	}
	addr, admin, adminKey := cl.Addr, cl.AdminAddr, cl.AdminKey
	drainerDir := t.TempDir()
	dr := start(t, "drainer", "--data-dir", drainerDir, "--admin-listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-key", adminKey,
		"--tls-cert", ops.ServerCert, "--tls-key", ops.ServerKey, "--tls-client-ca", ops.CA)
	if l := dr.waitLog("admin API listening"); l["tls"] != "mtls" {
		t.Fatalf("drainer admin API listening: %v", l)
	}
	drainerAdmin := dr.addr("admin API listening")

	cert := func(ca string, pki tlstest.Files) tlsflags.Client {
		return tlsflags.Client{CAFile: ca, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	}
	tests := []struct {
		name   string
		addr   string
		client tlsflags.Client
		ok     bool
	}{
		{"ingest, no client certificate", addr, tlsflags.Client{CAFile: tenants.CA}, false},
		{"ingest, stranger's certificate", addr, cert(tenants.CA, stranger), false},
		{"ingest, operator's certificate", addr, cert(tenants.CA, ops), false},
		{"ingest, tenant's certificate", addr, cert(tenants.CA, tenants), true},
		{"admin, no client certificate", admin, tlsflags.Client{CAFile: ops.CA}, false},
		{"admin, tenant's certificate", admin, cert(ops.CA, tenants), false},
		{"admin, operator's certificate", admin, cert(ops.CA, ops), true},
		{"drainer admin, no client certificate", drainerAdmin, tlsflags.Client{CAFile: ops.CA}, false},
		{"drainer admin, operator's certificate", drainerAdmin, cert(ops.CA, ops), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := dial(t, tt.addr, tt.client)
			err := healthy(t, conn)
			if (err == nil) != tt.ok {
				t.Fatalf("health check: %v, want ok %v", err, tt.ok)
			}
			if !tt.ok {
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("refused with %v, want UNAVAILABLE (handshake)", err)
				}
				return
			}
			if tt.addr == addr {
				_, err = ingestv1.NewIngestServiceClient(conn).Submit(callCtx(t, "alpha-key-123"), &ingestv1.SubmitRequest{Payload: []byte("mtls")})
			} else {
				_, err = adminv1.NewAdminServiceClient(conn).GetQueueStats(callCtx(t, adminKey), &adminv1.GetQueueStatsRequest{})
			}
			if err != nil {
				t.Fatalf("call with a valid certificate: %v", err)
			}
		})
	}
	// The certificate does not replace the key.
	conn := dial(t, addr, cert(tenants.CA, tenants))
	if _, err := ingestv1.NewIngestServiceClient(conn).Submit(callCtx(t, ""), &ingestv1.SubmitRequest{Payload: []byte("x")}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("certificate without key: %v, want UNAUTHENTICATED", err)
	}

	// The CLIs with and without their certificates.
	if out, err := cli(t, "submit", "--addr", addr, "--key", "gamma-key-123", "--tls-ca", tenants.CA,
		"--tls-cert", tenants.ClientCert, "--tls-key", tenants.ClientKey, "by sluicectl over mtls"); err != nil {
		t.Fatalf("sluicectl with a certificate: %v: %s", err, out)
	}
	if out, err := cli(t, "submit", "--addr", addr, "--key", "gamma-key-123", "--tls-ca", tenants.CA, "--timeout", "3s", "x"); err == nil {
		t.Fatalf("sluicectl without a certificate: %s", out)
	}
	for _, a := range []string{admin, drainerAdmin} {
		out, err := cli(t, "stats", "--admin-addr", a, "--admin-key", adminKey, "--tls-ca", ops.CA, "--tls-cert", ops.ClientCert, "--tls-key", ops.ClientKey, "--tls-server-name", "localhost")
		if err != nil || !strings.Contains(out, "QUEUE") {
			t.Fatalf("drainer stats at %s with a certificate: %v: %s", a, err, out)
		}
		if out, err := cli(t, "stats", "--admin-addr", a, "--admin-key", adminKey, "--tls-ca", ops.CA, "--timeout", "3s"); err == nil {
			t.Fatalf("drainer stats at %s without a certificate: %s", a, out)
		}
	}
	if err := dr.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("drainer exit: %v", err)
	}
}

// TestAbuseAndKeysNeverLogged runs a session of credential misuse against
// the real binaries at debug log level: tenant keys on the admin API, the
// admin key on the ingest API, guessed keys, two keys in one call, a
// tenant trying to submit as another, an unscoped replay. Every misuse is
// refused; and no key, right or wrong, appears in any log line, in any
// error a client got, or in the CLIs' output.
func TestAbuseAndKeysNeverLogged(t *testing.T) {
	t.Parallel()
	w := startWorker(t)
	dir := t.TempDir()
	const adminKey = "e2e-admin-key-secret-0005"
	tenantKeys := []string{"alpha-key-123", "beta-key-1234", "gamma-key-123", "slow-key-1234"}
	guesses := []string{"alpha-key-124", "alpha-key-1234", "e2e-admin-key-secret-0006", "sk_dev_guessedguessedguessed"}
	// The admin key comes from its file, as operators should keep it (a
	// flag shows in the process list).
	writeFile(t, dir, "admin-key", adminKey+"\n")
	gw := start(t, "gateway",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", dir,
		"--tenants", writeFile(t, dir, "tenants.yaml", tenantsYAML), "--queues", writeFile(t, dir, "queues.yaml", queuesYAML),
		"--worker-addr", w.Addr, "--log-level", "debug")
	addr, admin := gw.addr("gateway listening"), gw.addr("admin API listening")
	ingest := ingestv1.NewIngestServiceClient(dial(t, addr, tlsflags.Client{}))
	adminAPI := adminv1.NewAdminServiceClient(dial(t, admin, tlsflags.Client{}))
	var errs []string // every error message a client saw
	expect := func(what string, err error, want codes.Code) {
		t.Helper()
		if status.Code(err) != want {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}

	// Tenant keys and guesses on the admin API; no key at all.
	for _, k := range append(append([]string{}, tenantKeys...), guesses...) {
		_, err := adminAPI.GetQueueStats(callCtx(t, k), &adminv1.GetQueueStatsRequest{})
		expect("admin API with key "+k, err, codes.PermissionDenied)
		_, err = adminAPI.ReplayDLQ(callCtx(t, k), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}})
		expect("replay with key "+k, err, codes.PermissionDenied)
	}
	_, err := adminAPI.ListDLQ(callCtx(t, ""), &adminv1.ListDLQRequest{})
	expect("admin API without a key", err, codes.Unauthenticated)
	// The admin key and guesses on the ingest API.
	for _, k := range append([]string{adminKey}, guesses...) {
		_, err := ingest.Submit(callCtx(t, k), &ingestv1.SubmitRequest{Payload: []byte("x")})
		expect("submit with key "+k, err, codes.Unauthenticated)
	}
	// Two tenants' keys in one call count as none.
	two := metadata.AppendToOutgoingContext(callCtx(t, "alpha-key-123"), "authorization", "Bearer beta-key-1234")
	_, err = ingest.Submit(two, &ingestv1.SubmitRequest{Payload: []byte("x")})
	expect("submit with two keys", err, codes.Unauthenticated)
	// beta tries to pass as alpha: the job is beta's.
	spoof := metadata.AppendToOutgoingContext(callCtx(t, "beta-key-1234"), "tenant", "alpha", "x-sluice-tenant", "alpha")
	resp, err := ingest.Submit(spoof, &ingestv1.SubmitRequest{Payload: []byte("spoof"), Attributes: map[string]string{"tenant": "alpha"}})
	expect("submit with tenant-like metadata", err, codes.OK)
	w.waitFor(t, []string{resp.GetJobId()})
	if got := w.Job(resp.GetJobId()).GetTenant(); got != "beta" {
		t.Errorf("job delivered as tenant %q, want beta", got)
	}
	// A replay must name its tenants, with the admin key too.
	_, err = adminAPI.ReplayDLQ(callCtx(t, adminKey), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Lanes: []string{"standard"}}})
	expect("unscoped replay", err, codes.InvalidArgument)
	_, err = adminAPI.ReplayDLQ(callCtx(t, adminKey), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"alpha"}, AllTenants: true}})
	expect("replay of named tenants and all tenants", err, codes.InvalidArgument)
	_, err = adminAPI.ReplayDLQ(callCtx(t, adminKey), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"alpha"}}, DryRun: true})
	expect("scoped dry run", err, codes.OK)
	// The CLIs with wrong keys.
	var outputs []string
	for _, args := range [][]string{
		{"stats", "--admin-addr", admin, "--admin-key", "alpha-key-123"},
		{"dlq", "list", "--admin-addr", admin, "--admin-key", guesses[2]},
		{"dlq", "replay", "--admin-addr", admin, "--admin-key", adminKey, "--lane", "standard"},
	} {
		out, err := cli(t, args...)
		if err == nil {
			t.Errorf("drainer %v succeeded: %s", args, out)
		}
		outputs = append(outputs, out)
	}
	out, err := cli(t, "submit", "--addr", addr, "--key", guesses[0], "x")
	if err == nil {
		t.Errorf("sluicectl with a guessed key succeeded: %s", out)
	}
	outputs = append(outputs, out)
	if err := gw.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("gateway exit: %v", err)
	}

	var logs strings.Builder
	enc := json.NewEncoder(&logs)
	enc.SetEscapeHTML(false)
	lines := gw.Lines()
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(logs.String(), "PermissionDenied") || !strings.Contains(logs.String(), "Unauthenticated") {
		t.Fatalf("the debug log does not show the refused calls; %d lines", len(lines))
	}
	for _, k := range append(append([]string{adminKey}, tenantKeys...), guesses...) {
		for what, text := range map[string]string{"the gateway's log": logs.String(), "an error a client got": strings.Join(errs, "\n"), "CLI output": strings.Join(outputs, "\n")} {
			if strings.Contains(text, k) {
				t.Errorf("key %q appears in %s", k, what)
			}
		}
	}
	t.Logf("%d log lines, %d client errors and %d CLI outputs checked", len(lines), len(errs), len(outputs))
}

// TestCorruptConfigRefusedAtStart starts the gateway with one corrupt
// file at a time: it exits at once, with an error naming the file and the
// line (or the flag) to fix, and without echoing a key.
func TestCorruptConfigRefusedAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki := tlstest.New(t)
	good := writeFile(t, dir, "tenants.yaml", tenantsYAML)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			"tenant limit NaN",
			[]string{"--tenants", writeFile(t, dir, "nan.yaml", "tenants:\n  - id: a\n    tier: free\n    api_keys: [abcdefgh-1]\n    submit_rate: .nan\n")},
			`nan.yaml: line 2: tenant "a": submit_rate must be positive`,
		},
		{
			"tier field misspelt",
			[]string{"--tenants", writeFile(t, dir, "tier.yaml", "tiers:\n  free:\n    drain_rat: 5\ntenants: []\n")},
			`tier.yaml: line 3: unknown tier field "drain_rat"`,
		},
		{
			"plain key as a hash",
			[]string{"--tenants", writeFile(t, dir, "hash.yaml", "tenants:\n  - id: a\n    tier: free\n    api_key_sha256: [sk_live_do_not_echo_me]\n")},
			`hash.yaml: line 2: tenant "a": api_key_sha256[0] is not 64 hex digits`,
		},
		{
			"lane weight overflow",
			[]string{"--tenants", good, "--queues", writeFile(t, dir, "q.yaml", "lanes:\n  - {name: premium, weight: 9223372036854775807}\n  - {name: standard}\n  - {name: free}\n")},
			"weight 9223372036854775807 must be 1 to 1000",
		},
		{
			"setting twice",
			[]string{"--config", writeFile(t, dir, "c.yaml", "log-level: info\nconcurrency: 4\nlog-level: debug\n")},
			"c.yaml: line 3: log-level is set twice (first on line 1)",
		},
		{
			"TLS key of another certificate",
			[]string{"--tenants", good, "--tls-cert", pki.ServerCert, "--tls-key", pki.ClientKey},
			"--tls-cert/--tls-key: tls: private key does not match public key",
		},
		{
			"client CA without a certificate",
			[]string{"--tenants", good, "--admin-tls-client-ca", pki.CA},
			"--admin-tls-cert and --admin-tls-key go together",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", t.TempDir()}, tt.args...)
			cmd := exec.Command(filepath.Join(env.Bin, "gateway"), args...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(out.String(), tt.want) {
					t.Fatalf("exit %v, output:\n%s\nwant it to contain %q", err, out.String(), tt.want)
				}
				if strings.Contains(out.String(), "sk_live_do_not_echo_me") {
					t.Fatalf("the key is echoed: %s", out.String())
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("gateway still running with a corrupt config:\n%s", out.String())
			}
		})
	}
}
