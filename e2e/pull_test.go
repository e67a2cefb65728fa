package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	sluiceclient "github.com/sluice-dev/sluice/client"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
	sluiceworker "github.com/sluice-dev/sluice/worker"
)

// pullQueues has one lane whose visibility timeout (60 s) is far longer
// than any wait below: a job that comes back quickly was handed back.
const pullQueues = `
lanes:
  - {name: standard, shards: 4, visibility_timeout: 60s}
`

// pullGateway is a gateway serving pull workers.
type pullGateway struct {
	*proc
	ingestAddr string
	devKey     string
	workerAddr string
	workerKey  string
}

func startPullGateway(t *testing.T, args ...string) *pullGateway {
	t.Helper()
	dir := t.TempDir()
	gw := start(t, "gateway", append([]string{
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--data-dir", dir, "--queues", writeFile(t, dir, "queues.yaml", pullQueues),
	}, args...)...)
	g := &pullGateway{proc: gw, ingestAddr: gw.addr("gateway listening"), workerAddr: gw.addr("pull workers listening")}
	g.devKey = strings.TrimSpace(readFile(t, filepath.Join(dir, "dev-api-key")))
	g.workerKey = strings.TrimSpace(readFile(t, filepath.Join(dir, "worker-key")))
	return g
}

// submit sends n jobs with payloads prefix-i, with the Go client (which
// waits out the development tenant's rate as told), and returns their ids.
func (g *pullGateway) submit(t *testing.T, prefix string, n int) []string {
	t.Helper()
	return g.submitWith(t, sluiceclient.Config{Insecure: true}, prefix, n)
}

// submitWith is submit with the client's transport settings in cfg.
func (g *pullGateway) submitWith(t *testing.T, cfg sluiceclient.Config, prefix string, n int) []string {
	t.Helper()
	cfg.APIKey, cfg.MaxAttempts = g.devKey, 100
	c, err := sluiceclient.New(g.ingestAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	jobs := make([]sluiceclient.Job, n)
	for i := range jobs {
		jobs[i].Payload = fmt.Appendf(nil, "%s-%d", prefix, i)
	}
	res, err := c.SubmitBatch(t.Context(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("submit: %v", r.Err)
		}
		ids[i] = r.JobID
	}
	return ids
}

// startPullWorker runs `sluicectl worker --json` against g, and follows
// the jobs it prints.
func startPullWorker(t *testing.T, g *pullGateway, args ...string) (*proc, *printedJobs) {
	t.Helper()
	p, pj := runSluicectlWorker(t, append([]string{"--addr", g.workerAddr, "--key", g.workerKey}, args...)...)
	p.waitLog("pull worker connected")
	return p, pj
}

// has reports whether every id was printed.
func (pj *printedJobs) has(ids []string) bool {
	pj.mu.Lock()
	defer pj.mu.Unlock()
	seen := map[string]bool{}
	for _, j := range pj.jobs {
		seen[j["job_id"].(string)] = true
	}
	for _, id := range ids {
		if !seen[id] {
			return false
		}
	}
	return true
}

// A worker process killed while it holds 100 leased jobs: another worker
// has all 100 within 2 s, though the lane's visibility timeout is 60 s.
func TestPullWorkerKilled(t *testing.T) {
	t.Parallel()
	g := startPullGateway(t)
	holder, _ := startPullWorker(t, g, "--concurrency", "100", "--work", "1h")
	ids := g.submit(t, "held", 100)
	scrape(t, g.proc, `sluice_pull_credits_used{lane="standard"} 100`)

	_, other := startPullWorker(t, g, "--concurrency", "100")
	killed := time.Now()
	_ = holder.stop(syscall.SIGKILL)
	eventually(t, 30*time.Second, 10*time.Millisecond, func() bool { return other.has(ids) },
		"the killed worker's jobs did not reach the other worker within 30s")
	took := time.Since(killed)
	t.Logf("all 100 jobs redelivered %v after the SIGKILL", took)
	if took > 2*time.Second {
		t.Errorf("redelivery took %v, want ≤ 2s", took)
	}
	for _, id := range ids {
		if got := other.outcome(id); len(got) != 1 {
			t.Errorf("job %s printed %v by the other worker", id, got)
		}
	}
	scrape(t, g.proc, `sluice_pull_leases_released_total{lane="standard"} 100`, `sluice_drain_actions_total{action="delivered",lane="standard",reason=""} 100`)
}

// Fifty workers connect at once and share the work.
func TestPullFiftyWorkers(t *testing.T) {
	t.Parallel()
	g := startPullGateway(t)
	var mu sync.Mutex
	per := map[int]int{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			err := sluiceworker.Connect(ctx, g.workerAddr, g.workerKey, func(context.Context, sluiceworker.Job) error {
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				per[i]++
				mu.Unlock()
				return nil
			}, sluiceworker.ConnectOptions{Concurrency: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		})
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	scrape(t, g.proc, `sluice_pull_workers{lane="standard"} 50`, `sluice_pull_credits_granted{lane="standard"} 100`)
	g.submit(t, "many", 1000)
	scrape(t, g.proc, `sluice_drain_actions_total{action="delivered",lane="standard",reason=""} 1000`)
	mu.Lock()
	defer mu.Unlock()
	if len(per) < 25 {
		t.Errorf("only %d of 50 workers got jobs: %v", len(per), per)
	}
}

// A worker that stops reading its stream holds only its own credits: the
// other worker gets every other job, and the stuck worker's jobs come back
// when their leases time out.
func TestPullStuckReader(t *testing.T) {
	t.Parallel()
	g := startPullGateway(t, "--worker-lease-timeout", "3s")
	stuck := rawStream(t, g, g.workerKey)
	stuck.hello(t, 20) // and never reads again
	_, other := startPullWorker(t, g, "--concurrency", "8")
	ids := g.submit(t, "job", 400)
	eventually(t, time.Minute, 20*time.Millisecond, func() bool { return other.has(ids) },
		"jobs were not all delivered to the reading worker within a minute")
	scrape(t, g.proc, `sluice_drain_actions_total{action="delivered",lane="standard",reason=""} 400`)
}

// raw is a Connect stream driven by hand.
type raw struct {
	s      grpc.ClientStream
	cancel context.CancelFunc
	msgs   chan *workerv1.ConnectResponse
	err    chan error
}

func rawStream(t *testing.T, g *pullGateway, key string) *raw {
	t.Helper()
	conn, err := testcluster.Dial(g.workerAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(withKey(context.Background(), key))
	t.Cleanup(cancel)
	s, err := workerv1.NewPullServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &raw{s: s, cancel: cancel, msgs: make(chan *workerv1.ConnectResponse, 10000), err: make(chan error, 1)}
}

// hello opens the session and waits for Welcome, without reading further.
func (r *raw) hello(t *testing.T, credits uint32) {
	t.Helper()
	r.send(t, &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: credits}}})
	m := new(workerv1.ConnectResponse)
	if err := r.s.RecvMsg(m); err != nil || m.GetWelcome() == nil {
		t.Fatalf("no welcome: %v %v", m, err)
	}
}

// read starts reading the stream into r.msgs.
func (r *raw) read() {
	go func() {
		for {
			m := new(workerv1.ConnectResponse)
			if err := r.s.RecvMsg(m); err != nil {
				r.err <- err
				return
			}
			r.msgs <- m
		}
	}()
}

func (r *raw) send(t *testing.T, m *workerv1.ConnectRequest) {
	t.Helper()
	if err := r.s.SendMsg(m); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func (r *raw) next(t *testing.T) *workerv1.ConnectResponse {
	t.Helper()
	select {
	case m := <-r.msgs:
		return m
	case err := <-r.err:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("nothing received in 30s")
	}
	return nil
}

func (r *raw) job(t *testing.T) *workerv1.Job {
	t.Helper()
	m := r.next(t)
	if len(m.GetJobs().GetJobs()) != 1 {
		t.Fatalf("want one job, got %v", m)
	}
	return m.GetJobs().GetJobs()[0]
}

func ackOf(lease string) *workerv1.ConnectRequest {
	return &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: []*workerv1.Result{
		{Lease: lease, Outcome: workerv1.Outcome_OUTCOME_ACK},
	}}}}
}

// An ack sent after a reconnect with the old stream's lease is refused and
// changes nothing; the job, handed back when the old stream ended, comes
// again on the new one.
func TestPullStaleAck(t *testing.T) {
	t.Parallel()
	g := startPullGateway(t)
	first := rawStream(t, g, g.workerKey)
	first.hello(t, 1)
	first.read()
	ids := g.submit(t, "once", 1)
	old := first.job(t)
	first.cancel() // the connection drops before the ack

	second := rawStream(t, g, g.workerKey)
	second.hello(t, 1)
	second.read()
	again := second.job(t)
	if again.GetJobId() != ids[0] || again.GetAttempt() != 1 {
		t.Fatalf("after the reconnect got %s attempt %d, want %s attempt 1", again.GetJobId(), again.GetAttempt(), ids[0])
	}
	second.send(t, ackOf(old.GetLease()))
	ref := second.next(t).GetRefused()
	if ref == nil || codes.Code(ref.GetCode()) != codes.NotFound || !strings.Contains(ref.GetMessage(), "not held on this stream") {
		t.Fatalf("stale ack answered %v, want Refused NOT_FOUND", ref)
	}
	second.send(t, ackOf(again.GetLease()))
	scrape(t, g.proc, `sluice_drain_actions_total{action="delivered",lane="standard",reason=""} 1`)
}

// rawBytes is a codec that sends byte slices as they are: a way to put
// bytes that are no protobuf message on a stream.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawBytes) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawBytes) Name() string { return "proto" }

var _ encoding.Codec = rawBytes{}

// A flood of malformed messages is answered with errors, message by
// message (and bytes that decode to nothing end only their stream); the
// process keeps serving workers.
func TestPullMalformedFlood(t *testing.T) {
	t.Parallel()
	g := startPullGateway(t)
	r := rawStream(t, g, g.workerKey)
	r.hello(t, 1)
	r.read()
	bad := []*workerv1.ConnectRequest{
		{},
		{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{}}},
		{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: []*workerv1.Result{
			{Outcome: workerv1.Outcome_OUTCOME_ACK},
			{Lease: "forged", Outcome: workerv1.Outcome_OUTCOME_ACK},
			{Lease: "x", Outcome: workerv1.Outcome(42)},
		}}}},
	}
	const rounds = 500
	for range rounds {
		for _, m := range bad {
			r.send(t, m)
		}
	}
	for range rounds * 5 {
		if ref := r.next(t).GetRefused(); ref == nil || ref.GetMessage() == "" {
			t.Fatalf("want a refusal with a message, got %v", ref)
		}
	}

	// Bytes that are no message: the stream ends with an error.
	conn, err := testcluster.Dial(g.workerAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var garbage atomic.Int32
	for range 20 {
		ctx, cancel := context.WithTimeout(withKey(t.Context(), g.workerKey), 10*time.Second)
		s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, workerv1.PullService_Connect_FullMethodName, grpc.ForceCodec(rawBytes{}))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_ = s.SendMsg([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x01})
		var out []byte
		if err := s.RecvMsg(&out); err != nil {
			garbage.Add(1)
		}
		cancel()
	}
	if garbage.Load() != 20 {
		t.Errorf("%d of 20 garbage streams ended in an error", garbage.Load())
	}

	// Still serving: a well-behaved worker gets a job, and the flooding
	// stream is still served too.
	_, w := startPullWorker(t, g)
	ids := g.submit(t, "after", 2)
	eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return w.has(ids[:1]) || w.has(ids[1:]) },
		"no job delivered after the flood")
	select {
	case <-g.Done():
		t.Fatalf("gateway exited: %v", g.Err())
	default:
	}
}

// Pull workers connect over mutual TLS when the gateway serves it: a worker
// with a client certificate gets jobs; one without cannot connect.
func TestPullOverMutualTLS(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	g := startPullGateway(t, "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-client-ca", pki.CA)
	if l := g.waitLog("pull workers listening"); l["tls"] != "mtls" {
		t.Fatalf("pull workers listening: %v", l)
	}
	if err := healthy(t, dial(t, g.workerAddr, tlsflags.Client{CAFile: pki.CA})); status.Code(err) != codes.Unavailable {
		t.Errorf("a worker without a client certificate: %v, want UNAVAILABLE", err)
	}
	_, w := startPullWorker(t, g, "--tls-ca", pki.CA, "--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey)
	tlsCfg, err := sluiceclient.LoadTLS(pki.CA, pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	ids := g.submitWith(t, sluiceclient.Config{TLS: tlsCfg}, "secure", 3)
	eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return w.has(ids) },
		"jobs did not reach the worker over mutual TLS")
}

// Worker keys come from the tenant file's workers list, reloaded live:
// the development key and tenant keys are refused, a listed key serves
// only its lanes, and removing it ends the streams that use it.
func TestPullWorkerKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const tenants = `
tenants:
  - id: acme
    tier: standard
    api_keys: [acme-key-1234]
workers:
  - name: pool
    api_keys: [pool-key-1234]
    lanes: [standard]
`
	file := writeFile(t, dir, "tenants.yaml", tenants)
	gw := start(t, "gateway", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "",
		"--data-dir", dir, "--tenants", file, "--queues", writeFile(t, dir, "queues.yaml", pullQueues+"  - {name: premium, shards: 1}\n"))
	addr := gw.addr("pull workers listening")
	refused := func(key string, lanes ...string) error {
		err := sluiceworker.Connect(t.Context(), addr, key, func(context.Context, sluiceworker.Job) error { return nil },
			sluiceworker.ConnectOptions{Lanes: lanes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if !errors.Is(err, sluiceworker.ErrRefused) {
			t.Errorf("key %q lanes %v: Connect returned %v, want ErrRefused", key, lanes, err)
		}
		return err
	}
	_ = refused("acme-key-1234")                                                  // a tenant's key
	_ = refused(strings.TrimSpace(readFile(t, filepath.Join(dir, "worker-key")))) // the development key, with a workers list
	if err := refused("pool-key-1234", "premium"); err != nil && !strings.Contains(err.Error(), `may not serve lane "premium"`) {
		t.Errorf("another lane: %v", err)
	}

	w, _ := startPullWorker(t, &pullGateway{proc: gw, workerAddr: addr, workerKey: "pool-key-1234"})
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(tenants, "pool-key-1234", "pool-key-5678")), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Done():
		if err := w.Err(); err == nil {
			t.Error("the worker whose key was removed exited cleanly, want an error")
		}
		if !strings.Contains(w.Tail(20), "revoked") {
			t.Errorf("worker's log does not say its key was revoked:\n%s", w.Tail(20))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker whose key was removed still runs after 30s")
	}
}

// TestPullWorkerAtTheIngestAddress: `sluicectl worker --addr` given the
// gateway's ingest address stops at once saying that address does not
// serve the worker API and where to connect, as it does at the admin
// address. It said "refused by sluice: unknown API key" (the ingest
// listener checked the worker key as an API key first), which sent the
// user after the wrong fix.
func TestPullWorkerAtTheIngestAddress(t *testing.T) {
	t.Parallel()
	g := startPullGateway(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(env.Bin, "sluicectl"), "worker", "--addr", g.ingestAddr, "--key", g.workerKey).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("sluicectl worker at the ingest address: exit %v (ctx %v), want it to stop with an error:\n%s", err, ctx.Err(), out)
	}
	for _, want := range []string{g.ingestAddr + " does not serve the worker API", "ingest listener", "--worker-listen"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "API key") {
		t.Errorf("output blames the key:\n%s", out)
	}
}

// TestPullWorkerOutlivesItsLease: `sluicectl worker --work` longer than
// the gateway's --worker-lease-timeout times out every attempt. The
// gateway logged each failed delivery and the worker printed nothing,
// while the job burned its attempts; now the worker prints the job with
// outcome lease-timeout and logs what to do about it.
func TestPullWorkerOutlivesItsLease(t *testing.T) {
	t.Parallel()
	g := startPullGateway(t, "--worker-lease-timeout", "1s")
	w, printed := startPullWorker(t, g, "--concurrency", "1", "--work", "3s")
	id := g.submit(t, "slow", 1)[0]
	eventually(t, 30*time.Second, 20*time.Millisecond, func() bool { return slices.Contains(printed.outcome(id), "lease-timeout") },
		"the worker printed no lease-timeout for a job whose --work outlasts the lease")
	l := w.waitLog("a job's lease timed out before its handler finished: sluice fails this attempt and redelivers the job")
	if hint, _ := l["hint"].(string); l["job_id"] != id || !strings.Contains(hint, "--worker-lease-timeout") {
		t.Errorf("the worker logged %v, want job_id %s and a hint naming --worker-lease-timeout", l, id)
	}
}
