package pull_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-dev/sluice/drainer"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/pull"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/worker"
)

func TestMain(m *testing.M) { os.Exit(topotest.Main(m)) }

// Two lanes, so that a worker can serve one and not the other; a long
// visibility timeout, so that a job redelivered quickly was handed back,
// not timed out.
const twoLanes = `
max_receive_count: 10
lanes:
  - name: std
    shards: 2
    staleness_bound: 1m
    visibility_timeout: 60s
  - name: gold
    shards: 1
    staleness_bound: 1m
    visibility_timeout: 60s
`

// Worker keys of the rig.
const (
	keyAll  = "worker-key-all"
	keyGold = "worker-key-gold"
)

var workers = map[string]*tenant.Worker{
	keyAll:  {Name: "all"},
	keyGold: {Name: "gold-only", Lanes: []string{"gold"}},
}

// rig is a real drainer on the embedded backend whose handler is a hub
// served on a loopback gRPC port.
type rig struct {
	b    *topotest.Bundle
	hub  *pull.Hub
	d    *drainer.Drainer
	addr string
	keys sync.Map // key → *tenant.Worker
	// version is the hub's KeysVersion: a test that changes keys stores
	// a new one to act as a reload; left alone, only the sweep checks.
	version atomic.Pointer[tenant.Version]
}

func newRig(t testing.TB, lease time.Duration) *rig {
	t.Helper()
	return newRigOn(t, twoLanes, lease)
}

// newRigOn is newRig on the lanes of topology, which has std and gold.
func newRigOn(t testing.TB, topology string, lease time.Duration) *rig {
	t.Helper()
	return newRigWith(t, topology, lease, sideliner.Policy{MaxAttempts: 3, RetryBase: 10 * time.Millisecond, RetryCap: 50 * time.Millisecond})
}

// newRigWith is newRigOn with the drainer's sideline policy.
func newRigWith(t testing.TB, topology string, lease time.Duration, policy sideliner.Policy) *rig {
	t.Helper()
	r := &rig{b: topotest.Setup(t, topology)}
	for k, w := range workers {
		r.keys.Store(k, w)
	}
	var d *drainer.Drainer
	hub, err := pull.New(pull.Config{
		Authenticate: func(key string) (*tenant.Worker, bool) {
			w, ok := r.keys.Load(key)
			if !ok {
				return nil, false
			}
			return w.(*tenant.Worker), true
		},
		KeysVersion:  r.version.Load,
		Lanes:        []string{"std", "gold"},
		Capacity:     func(slots int, lanes map[string]int) { d.SetCapacity(slots, lanes) },
		LeaseTimeout: lease,
		StallTimeout: time.Second,
		Logger:       topotest.QuietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err = drainer.New(drainer.Config{
		Backend: r.b.Backend, Topology: r.b.Topo, Handler: hub, Concurrency: 64,
		HandlerTimeout: pull.MaxLeaseTimeout + time.Minute,
		Policy:         policy,
		Logger:         topotest.QuietLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.hub, r.d = hub, d
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// As the worker listener (internal/node): worker.Connect pings.
	srv := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	workerv1.RegisterPullServiceServer(srv, hub)
	go func() { _ = srv.Serve(lis) }()
	r.addr = lis.Addr().String()
	ctx := t.Context()
	if err := hub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(stopCtx)
		_ = hub.Stop(stopCtx)
		srv.Stop()
	})
	return r
}

// enqueue puts n jobs of lane on its first shard; ids are prefix-0….
func (r *rig) enqueue(t *testing.T, lane, prefix string, n int) {
	t.Helper()
	for i := range n {
		e := topotest.Envelope("acme", fmt.Sprintf("%s-%d", prefix, i), time.Now())
		e.Lane = lane
		r.b.Enqueue(t, r.b.Topo.ShardQueue(lane, 0), e)
	}
}

// stream is a raw Connect stream, for the protocol's edges.
type stream struct {
	t      *testing.T
	s      workerv1.PullService_ConnectClient
	cancel context.CancelFunc
	msgs   chan *workerv1.ConnectResponse // read by one goroutine
	err    chan error                     // the stream's end
}

func (r *rig) dial(t *testing.T, key string) (workerv1.PullService_ConnectClient, context.CancelFunc) {
	t.Helper()
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	}
	s, err := workerv1.NewPullServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s, cancel
}

// connect opens a raw session with credits on lanes and waits for Welcome.
func (r *rig) connect(t *testing.T, key string, credits uint32, lanes ...string) *stream {
	t.Helper()
	s, cancel := r.dial(t, key)
	t.Cleanup(cancel)
	st := &stream{t: t, s: s, cancel: cancel, msgs: make(chan *workerv1.ConnectResponse, 10000), err: make(chan error, 1)}
	st.send(&workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Lanes: lanes, Credits: credits}}})
	m, err := s.Recv()
	if err != nil || m.GetWelcome() == nil {
		t.Fatalf("no welcome: %v %v", m, err)
	}
	go func() {
		for {
			m, err := s.Recv()
			if err != nil {
				st.err <- err
				return
			}
			st.msgs <- m
		}
	}()
	return st
}

func (st *stream) send(m *workerv1.ConnectRequest) {
	st.t.Helper()
	if err := st.s.Send(m); err != nil {
		st.t.Fatalf("send: %v", err)
	}
}

func (st *stream) results(rs ...*workerv1.Result) {
	st.t.Helper()
	st.send(&workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: rs}}})
}

// jobs reads until it has n jobs, failing on anything else.
func (st *stream) jobs(n int) []*workerv1.Job {
	st.t.Helper()
	var out []*workerv1.Job
	for len(out) < n {
		m := st.recv()
		if m.GetJobs() == nil {
			st.t.Fatalf("want jobs, got %v", m)
		}
		out = append(out, m.GetJobs().GetJobs()...)
	}
	return out
}

func (st *stream) recv() *workerv1.ConnectResponse {
	st.t.Helper()
	select {
	case m := <-st.msgs:
		return m
	case err := <-st.err:
		st.t.Fatalf("recv: %v", err)
	case <-time.After(30 * time.Second):
		st.t.Fatal("nothing received in 30s")
	}
	return nil
}

// idle reports whether nothing arrives within d.
func (st *stream) idle(d time.Duration) bool {
	select {
	case <-st.msgs:
		return false
	case <-time.After(d):
		return true
	}
}

// ended waits for the stream's end and returns its error.
func (st *stream) ended() error {
	st.t.Helper()
	select {
	case err := <-st.err:
		return err
	case <-time.After(30 * time.Second):
		st.t.Fatal("the stream did not end in 30s")
		return nil
	}
}

func ack(lease string) *workerv1.Result {
	return &workerv1.Result{Lease: lease, Outcome: workerv1.Outcome_OUTCOME_ACK}
}

// collector is a worker.Connect handler recording each job's attempts.
type collector struct {
	mu       sync.Mutex
	attempts map[string][]int
	answer   func(worker.Job) error
	want     int    // with reached: call reached once this many jobs came
	reached  func() // (onCount)
}

// onCount has fn called once n distinct jobs have come.
func (c *collector) onCount(n int, fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.want, c.reached = n, fn
}

func newCollector(answer func(worker.Job) error) *collector {
	return &collector{attempts: map[string][]int{}, answer: answer}
}

func (c *collector) handle(_ context.Context, j worker.Job) error {
	c.mu.Lock()
	c.attempts[j.ID] = append(c.attempts[j.ID], j.Attempt)
	if c.reached != nil && len(c.attempts) == c.want {
		c.reached()
		c.reached = nil
	}
	c.mu.Unlock()
	if c.answer != nil {
		return c.answer(j)
	}
	return nil
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.attempts)
}

func (c *collector) of(id string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.attempts[id]...)
}

// run starts worker.Connect and stops it at cleanup.
func (r *rig) run(t testing.TB, key string, c *collector, opts worker.ConnectOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts.Logger = topotest.QuietLog
	done := make(chan error, 1)
	go func() { done <- worker.Connect(ctx, r.addr, key, c.handle, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Connect: %v", err)
		}
	})
}

// A pulled job's answer decides its fate as a pushed job's does: ack
// deletes it, a retry comes back with the next attempt, a permanent
// failure is dead-lettered with the worker's reason.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	c := newCollector(func(j worker.Job) error {
		switch {
		case strings.HasPrefix(j.ID, "flaky") && j.Attempt == 1:
			return worker.RetryAfter(errors.New("not yet"), 20*time.Millisecond)
		case strings.HasPrefix(j.ID, "poison"):
			return worker.Permanent(errors.New("cannot parse"))
		}
		return nil
	})
	r.run(t, keyAll, c, worker.ConnectOptions{Concurrency: 8})
	r.enqueue(t, "std", "ok", 50)
	r.enqueue(t, "std", "flaky", 5)
	r.enqueue(t, "gold", "poison", 1)
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 55 && r.d.Counts().DeadLettered == 1 })
	if got := c.of("flaky-3"); len(got) != 2 || got[1] != 2 {
		t.Errorf("flaky job's attempts %v, want [1 2]", got)
	}
	dl := r.b.DeadLetters(t, "gold")
	if len(dl) != 1 || !strings.Contains(dl[0].GetLastError(), "cannot parse") {
		t.Fatalf("dead letters %v, want poison-0 with the worker's reason", dl)
	}
	if n := r.b.Stats(t, r.b.Topo.ShardQueue("std", 0)); n.Visible+n.InFlight+n.Delayed != 0 {
		t.Errorf("shard still holds %+v", n)
	}
}

// Sluice never sends more jobs than the credits outstanding; an answer
// frees a credit, and Credits changes them.
func TestCredits(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.enqueue(t, "std", "j", 10)
	st := r.connect(t, keyAll, 3)
	got := st.jobs(3)
	if !st.idle(300 * time.Millisecond) {
		t.Fatal("a 4th job arrived with 3 credits")
	}
	st.results(ack(got[0].GetLease()))
	st.jobs(1)
	st.send(&workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Credits{Credits: &workerv1.Credits{Credits: 6}}})
	st.jobs(3)
}

// A worker that goes away hands its jobs back at once: another worker
// gets them long before the 60 s visibility timeout, with the attempt not
// counted. An ack of an old lease on a new stream is refused and changes
// nothing.
func TestDisconnectReleasesAndFencesStaleAcks(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.enqueue(t, "std", "j", 20)
	first := r.connect(t, keyAll, 20)
	held := first.jobs(20)
	first.cancel() // the worker dies

	second := r.connect(t, keyAll, 20)
	start := time.Now()
	again := second.jobs(20)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("redelivery took %v, want well under the 60s visibility timeout", took)
	}
	for _, j := range again {
		if j.GetAttempt() != 1 {
			t.Errorf("job %s redelivered as attempt %d, want 1 (a release is not an attempt)", j.GetJobId(), j.GetAttempt())
		}
	}
	// The stale ack: the first stream's lease, on the second stream.
	second.results(ack(held[0].GetLease()))
	m := second.recv()
	ref := m.GetRefused()
	if ref == nil || codes.Code(ref.GetCode()) != codes.NotFound || ref.GetLease() != held[0].GetLease() {
		t.Fatalf("stale ack answered %v, want Refused NOT_FOUND for its lease", m)
	}
	if got := r.d.Counts().Delivered; got != 0 {
		t.Fatalf("%d delivered after a stale ack, want 0", got)
	}
	for _, j := range again {
		second.results(ack(j.GetLease()))
	}
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 20 })
	if got := r.d.Counts().Released; got != 20 {
		t.Errorf("released %d, want 20", got)
	}
}

// TestDroppedStreamsDoNotDeadLetterAJob drops a worker's stream while it
// holds a job, as many times as the lane's max_receive_count (a network
// cut, redeploys). Each drop hands the job back without an attempt, so
// the backend's redrive must not dead-letter it: a healthy worker gets it
// as attempt 1.
func TestDroppedStreamsDoNotDeadLetterAJob(t *testing.T) {
	t.Parallel()
	const topo = `
max_receive_count: 3
lanes:
  - {name: std, shards: 1, staleness_bound: 1m, visibility_timeout: 60s}
`
	r := newRigOn(t, topo, 0)
	// A long job keeps one worker of the lane busy throughout, so the
	// lane stays open (its held jobs are not handed back).
	r.enqueue(t, "std", "long", 1)
	keeper := r.connect(t, keyAll, 1, "std")
	keeper.jobs(1)
	r.enqueue(t, "std", "j", 1)
	for range 3 {
		st := r.connect(t, keyAll, 1, "std")
		if got := st.jobs(1); got[0].GetJobId() != "j-0" || got[0].GetAttempt() != 1 {
			t.Fatalf("got %v, want j-0 as attempt 1", got[0])
		}
		st.cancel() // the stream drops before the worker answers
		topotest.WaitFor(t, func() bool { return r.hub.Workers() == 1 })
	}
	c := newCollector(nil)
	r.run(t, keyAll, c, worker.ConnectOptions{Concurrency: 1})
	topotest.WaitFor(t, func() bool { return c.count() > 0 || len(r.b.DeadLetters(t, "std")) > 0 })
	if dl := r.b.DeadLetters(t, "std"); len(dl) != 0 {
		t.Fatalf("dead-lettered (attempts %d, reason %q) after 3 dropped streams; counts %+v",
			dl[0].GetAttempts(), dl[0].GetDeadLetterReason(), r.d.Counts())
	}
	if got := c.of("j-0"); len(got) != 1 || got[0] != 1 {
		t.Fatalf("the healthy worker got attempts %v, want [1]", got)
	}
}

// A flood of malformed messages is answered with refusals, and the
// session (and the hub) keep serving.
func TestMalformedMessages(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	st := r.connect(t, keyAll, 1)
	bad := []*workerv1.ConnectRequest{
		{},
		{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: 1}}},
		{Message: &workerv1.ConnectRequest_Credits{Credits: &workerv1.Credits{Credits: pull.MaxCredits + 1}}},
		{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: []*workerv1.Result{
			{Outcome: workerv1.Outcome_OUTCOME_ACK},
			{Lease: "x", Outcome: workerv1.Outcome(99)},
			{Lease: "x", Outcome: workerv1.Outcome_OUTCOME_RETRY, Delay: durationpb.New(-time.Second)},
			{Lease: "nope", Outcome: workerv1.Outcome_OUTCOME_ACK},
		}}}},
	}
	const rounds = 100
	for range rounds {
		for _, m := range bad {
			st.send(m)
		}
	}
	want := rounds * 7
	codesSeen := map[codes.Code]int{}
	for range want {
		ref := st.recv().GetRefused()
		if ref == nil || ref.GetMessage() == "" {
			t.Fatalf("want a refusal with a message, got %v", ref)
		}
		codesSeen[codes.Code(ref.GetCode())]++
	}
	if codesSeen[codes.InvalidArgument] != rounds*6 || codesSeen[codes.NotFound] != rounds {
		t.Errorf("refusals by code %v", codesSeen)
	}
	r.enqueue(t, "std", "after", 1)
	j := st.jobs(1)
	st.results(ack(j[0].GetLease()))
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 1 })
}

// Keys and Hello are checked before any job is handed out.
func TestSessionRefusals(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	tests := []struct {
		name  string
		key   string
		first *workerv1.ConnectRequest
		code  codes.Code
		msg   string
	}{
		{"no key", "", hello(1), codes.Unauthenticated, "missing worker key"},
		// Both places a worker key comes from are named: the message named
		// only the tenant file, which development mode has none of (found
		// by a tester).
		{"tenant key", "tenant-key-1", hello(1), codes.PermissionDenied, "not a worker key: pull workers need a worker key, " +
			"with --tenants one from the tenant file's workers list, without it (development mode) the one in <data-dir>/worker-key"},
		{"not hello", keyAll, &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Credits{Credits: &workerv1.Credits{}}}, codes.InvalidArgument, "first message must be Hello"},
		{"unknown lane", keyAll, hello(1, "silver"), codes.InvalidArgument, `no lane "silver"`},
		{"lane not allowed", keyGold, hello(1, "std"), codes.PermissionDenied, `may not serve lane "std"`},
		{"too many credits", keyAll, hello(pull.MaxCredits + 1), codes.InvalidArgument, "at most"},
		{"lease timeout", keyAll, &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: 1, LeaseTimeout: durationpb.New(time.Millisecond)}}}, codes.InvalidArgument, "lease_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, cancel := r.dial(t, tt.key)
			defer cancel()
			_ = s.Send(tt.first)
			_, err := s.Recv()
			if st, _ := status.FromError(err); st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Fatalf("got %v, want %v containing %q", err, tt.code, tt.msg)
			}
		})
	}
	if n := r.hub.Workers(); n != 0 {
		t.Errorf("%d workers connected after refusals", n)
	}
}

func hello(credits uint32, lanes ...string) *workerv1.ConnectRequest {
	return &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: &workerv1.Hello{Credits: credits, Lanes: lanes}}}
}

// A worker serving one lane gets only that lane's jobs, and the other
// lane's jobs go to the worker serving it, with no slot wasted waiting.
func TestLanes(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	var wrong atomic.Int32
	gold := newCollector(func(j worker.Job) error {
		if j.Lane != "gold" {
			wrong.Add(1)
		}
		return nil
	})
	all := newCollector(nil)
	r.run(t, keyGold, gold, worker.ConnectOptions{Concurrency: 2})
	r.run(t, keyAll, all, worker.ConnectOptions{Concurrency: 2, Lanes: []string{"std"}})
	r.enqueue(t, "gold", "g", 30)
	r.enqueue(t, "std", "s", 30)
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 60 })
	if wrong.Load() != 0 || gold.count() != 30 || all.count() != 30 {
		t.Fatalf("gold worker got %d (%d of another lane), std worker %d", gold.count(), wrong.Load(), all.count())
	}
	if got := r.d.Counts().Released; got != 0 {
		t.Errorf("%d jobs handed back: a slot was granted that no worker could take", got)
	}
}

// An unanswered lease times out as a failed attempt; Extend keeps a long
// job's lease.
func TestLeaseTimeoutAndExtend(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	r.enqueue(t, "std", "slow", 1)
	st := r.connect(t, keyAll, 1)
	j := st.jobs(1)[0]
	for range 4 { // 2 s in all, past the 1 s lease, kept by extends
		time.Sleep(500 * time.Millisecond)
		st.results(&workerv1.Result{Lease: j.GetLease(), Outcome: workerv1.Outcome_OUTCOME_EXTEND})
	}
	st.results(ack(j.GetLease()))
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 1 })
	if c := r.d.Counts(); c.Retried != 0 {
		t.Fatalf("an extended job was retried: %+v", c)
	}

	// No answer: the lease times out, the attempt fails, and the silent
	// worker gets no new job (its own job's retry included) until it
	// answers again.
	r.enqueue(t, "std", "stuck", 1)
	j = st.jobs(1)[0]
	topotest.WaitFor(t, func() bool { return r.d.Counts().Retried == 1 })
	if !st.idle(time.Second) {
		t.Fatal("a worker that let its lease time out got another job")
	}
	st.results(ack(j.GetLease()))
	if ref := st.recv().GetRefused(); ref == nil || codes.Code(ref.GetCode()) != codes.NotFound {
		t.Fatalf("ack of a timed-out lease: %v, want NOT_FOUND", ref)
	}
	again := st.jobs(1)[0]
	if again.GetJobId() != j.GetJobId() || again.GetAttempt() != 2 {
		t.Fatalf("after a timed-out lease got %s attempt %d, want %s attempt 2", again.GetJobId(), again.GetAttempt(), j.GetJobId())
	}
	st.results(ack(again.GetLease()))
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 2 })
}

// On ctx's end, Connect stops asking, finishes the running jobs and
// answers them: none is delivered twice.
func TestGracefulDrain(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	started := make(chan struct{}, 4)
	c := newCollector(func(worker.Job) error {
		started <- struct{}{}
		time.Sleep(300 * time.Millisecond)
		return nil
	})
	r.enqueue(t, "std", "j", 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, r.addr, keyAll, c.handle, worker.ConnectOptions{Concurrency: 4, Logger: topotest.QuietLog})
	}()
	for range 4 {
		<-started
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 4 })
	if c := r.d.Counts(); c.Released != 0 || c.Retried != 0 {
		t.Fatalf("a drained worker's jobs came back: %+v", c)
	}
}

// A key removed from the config ends the sessions using it.
func TestRevokedKey(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	st := r.connect(t, keyGold, 1)
	r.keys.Delete(keyGold)
	err := st.ended()
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after revocation got %v, want PERMISSION_DENIED", err)
	}
	if err := worker.Connect(t.Context(), r.addr, keyGold, newCollector(nil).handle, worker.ConnectOptions{Logger: topotest.QuietLog}); !errors.Is(err, worker.ErrRefused) {
		t.Fatalf("Connect with a revoked key: %v, want ErrRefused", err)
	}
}

// A job placed right after a reload that revoked a key is not given to
// that key's sessions: the key is checked again before the job is placed,
// not only at the next sweep (up to 250 ms later; found in review).
func TestRevokedKeyGetsNoJobAfterTheReload(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	st := r.connect(t, keyGold, 1)
	r.keys.Delete(keyGold)
	r.version.Store(&tenant.Version{}) // the reload
	job := &worker.Job{ID: "after-revocation", Tenant: "acme", Lane: "gold", Attempt: 1, EnqueuedAt: time.Now()}
	if err := r.hub.Handle(t.Context(), job); !errors.Is(err, worker.ErrReleased) {
		t.Errorf("Handle after the revocation: %v, want ErrReleased (no worker may take it)", err)
	}
	for {
		select {
		case m := <-st.msgs:
			if m.GetJobs() != nil {
				t.Fatalf("the revoked key's session got %v", m.GetJobs().GetJobs())
			}
		case err := <-st.err:
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("after revocation got %v, want PERMISSION_DENIED", err)
			}
			return
		case <-time.After(30 * time.Second):
			t.Fatal("the revoked key's stream did not end in 30s")
		}
	}
}

// A reload that narrows a key's lanes ends the sessions serving a lane the
// key no longer allows: they kept getting that lane's jobs until they
// reconnected (found in review).
func TestNarrowedKeyEndsItsSessions(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	st := r.connect(t, keyAll, 4) // no lanes asked: std and gold
	r.keys.Store(keyAll, &tenant.Worker{Name: "all", Lanes: []string{"std"}})
	err := st.ended()
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), `lane "gold"`) {
		t.Fatalf("after the key lost lane gold the session got %v, want PERMISSION_DENIED naming it", err)
	}
	// Reconnected, it serves what the key allows now.
	c := newCollector(nil)
	r.run(t, keyAll, c, worker.ConnectOptions{Concurrency: 4})
	r.enqueue(t, "std", "s", 1)
	topotest.WaitFor(t, func() bool { return c.count() == 1 })
}

// A worker that stops reading while sends to it block is stalled: after
// StallTimeout (1 s here) the jobs not yet sent are handed back, without
// an attempt counted, and go to a worker that reads; the stalled one gets
// no new jobs.
func TestStalledReader(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	s, cancel := r.dial(t, keyAll)
	t.Cleanup(cancel)
	if err := s.Send(hello(40)); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("no welcome: %v %v", m, err)
	}
	// From here on the stream is never read.
	for i := range 40 {
		e := topotest.Envelope("acme", fmt.Sprintf("big-%d", i), time.Now())
		e.Payload = make([]byte, 150<<10)
		r.b.Enqueue(t, r.b.Topo.ShardQueue("std", 0), e)
	}
	topotest.WaitFor(t, func() bool { return r.d.Counts().Released > 0 })
	c := newCollector(nil)
	r.run(t, keyAll, c, worker.ConnectOptions{Concurrency: 8})
	released := r.d.Counts().Released
	topotest.WaitFor(t, func() bool { return int64(c.count()) >= released })
	if got := r.d.Counts().Retried; got != 0 {
		t.Errorf("%d retries: a handed-back job is not an attempt", got)
	}
}

// A lane no connected worker serves is not read ahead, and when its last
// worker goes, the jobs read ahead for it are handed back at once: on SQS
// a drainer with workers takes them, rather than a drainer without.
func TestNoWorkerNoReadAhead(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.enqueue(t, "std", "j", 30)
	shard := r.b.Topo.ShardQueue("std", 0)
	time.Sleep(300 * time.Millisecond)
	if st := r.b.Stats(t, shard); st.Visible != 30 {
		t.Fatalf("with no worker: %+v, want all 30 visible", st)
	}
	gold := r.connect(t, keyGold, 5) // serves the other lane only
	time.Sleep(300 * time.Millisecond)
	if st := r.b.Stats(t, shard); st.Visible != 30 {
		t.Fatalf("with a worker of another lane: %+v, want all 30 visible", st)
	}
	std := r.connect(t, keyAll, 1, "std")
	std.jobs(1)
	topotest.WaitFor(t, func() bool { return r.b.Stats(t, shard).Visible < 29 }) // read ahead
	std.cancel()
	topotest.WaitFor(t, func() bool { return r.b.Stats(t, shard).Visible == 30 })
	_ = gold
}

// TestFIFOLaneDoesNotBlockAnother: in a plain FIFO (--sideline=false) a
// lane whose worker's credits are all busy must not hold up a lane whose
// worker has credits free. Every job was held in one queue, in the order
// read, and the scheduler looks only at its head: a std job waiting for
// std's one credit kept the gold job behind it from its idle gold worker
// until std's job finished.
func TestFIFOLaneDoesNotBlockAnother(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, twoLanes, time.Minute, sideliner.Policy{NoSideline: true, MaxAttempts: 3, RetryBase: 10 * time.Millisecond, RetryCap: 50 * time.Millisecond})
	std := r.connect(t, keyAll, 1, "std")
	r.enqueue(t, "std", "s", 2)
	busy := std.jobs(1)                                         // held unanswered: std's one credit is taken
	topotest.WaitFor(t, func() bool { return r.d.Held() >= 1 }) // s-1 waits at the head
	gold := r.connect(t, keyGold, 5, "gold")
	r.enqueue(t, "gold", "g", 1)
	select {
	case m := <-gold.msgs:
		if id := m.GetJobs().GetJobs()[0].GetJobId(); !strings.HasPrefix(id, "g") {
			t.Fatalf("gold worker got %q", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("gold job not delivered in 5s to a gold worker with 5 free credits while std's next job waits for std's busy credit (held %d)", r.d.Held())
	}
	std.results(ack(busy[0].GetLease()))
	if next := std.jobs(1); !strings.HasPrefix(next[0].GetJobId(), "s") {
		t.Fatalf("std worker got %q after its ack", next[0].GetJobId())
	}
}

// TestConcurrencyHoldsPastALeaseTimeout: a handler that outlives its
// lease (no Extend) keeps running on the worker while sluice frees its
// credit and sends another job; Connect ran more handlers than
// ConnectOptions.Concurrency (found in review). The job waits for a slot.
func TestConcurrencyHoldsPastALeaseTimeout(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	var mu sync.Mutex
	running, peak := 0, 0
	release := make(chan struct{})
	c := newCollector(func(j worker.Job) error {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		if strings.HasPrefix(j.ID, "slow") {
			<-release
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	})
	defer close(release)
	r.run(t, keyAll, c, worker.ConnectOptions{Concurrency: 2})
	r.enqueue(t, "std", "slow", 1)
	time.Sleep(300 * time.Millisecond)
	r.enqueue(t, "std", "fast", 30)
	time.Sleep(3 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if peak > 2 {
		t.Errorf("%d handlers ran at once with Concurrency 2", peak)
	}
}

// TestExtendKeepsTheLease: an EXTEND pushes the lease's deadline out,
// whatever form its delay takes. An explicit zero delay means "the
// session's lease timeout" (worker.proto); the hub took it as a deadline
// of now, so the next sweep failed the attempt the worker had just asked
// to keep (found in review).
func TestExtendKeepsTheLease(t *testing.T) {
	t.Parallel()
	delays := []struct {
		name  string
		delay *durationpb.Duration
	}{
		{"no delay", nil},
		{"zero delay", durationpb.New(0)},
		{"30s", durationpb.New(30 * time.Second)},
	}
	r := newRig(t, time.Minute)
	r.enqueue(t, "std", "long", len(delays))
	st := r.connect(t, keyAll, uint32(len(delays)))
	jobs := st.jobs(len(delays))
	for i, d := range delays {
		st.results(&workerv1.Result{Lease: jobs[i].GetLease(), Outcome: workerv1.Outcome_OUTCOME_EXTEND, Delay: d.delay})
	}
	// The time under test: several sweeps (every 250 ms) pass, all well
	// inside every extended deadline.
	time.Sleep(time.Second)
	for i := range delays {
		st.results(ack(jobs[i].GetLease()))
	}
	topotest.WaitFor(t, func() bool {
		c := r.d.Counts()
		return c.Delivered+c.Retried == int64(len(delays))
	})
	if c := r.d.Counts(); c.Retried != 0 || c.Delivered != int64(len(delays)) {
		t.Errorf("after extends: %d delivered, %d retried; want %d delivered, none retried", c.Delivered, c.Retried, len(delays))
		for i, d := range delays {
			t.Logf("%s: job %s", d.name, jobs[i].GetJobId())
		}
	}
	if !st.idle(200 * time.Millisecond) {
		t.Error("an ack after an extend was refused, or the job came back")
	}
}

// TestNarrowedKeyWorkerReconnects: a worker.Connect worker that asked for
// every lane its key allows keeps serving after a reload narrows the key:
// its session ends (PERMISSION_DENIED, "reconnect for the lanes it
// allows") and it reconnects for the lanes left. Connect took the end of a
// welcomed session as a refusal of its key and returned ErrRefused, so
// the worker process stopped for good (found in review). A key revoked
// outright still stops it: the reconnect is refused.
func TestNarrowedKeyWorkerReconnects(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	sessions := make(chan string, 10)
	c := newCollector(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, r.addr, keyAll, c.handle, worker.ConnectOptions{
			Concurrency: 2, Logger: topotest.QuietLog, OnSession: func(s string) { sessions <- s },
		})
	}()
	next := func(what string) {
		t.Helper()
		select {
		case <-sessions:
		case err := <-done:
			t.Fatalf("%s: Connect returned %v", what, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no session in 30s", what)
		}
	}
	next("first session")
	r.keys.Store(keyAll, &tenant.Worker{Name: "all", Lanes: []string{"std"}})
	next("after the key lost lane gold")
	r.enqueue(t, "std", "s", 1)
	deadline := time.After(30 * time.Second)
	for c.count() < 1 {
		select {
		case err := <-done:
			t.Fatalf("Connect returned %v; want it serving lane std", err)
		case <-deadline:
			t.Fatal("the std job did not reach the worker in 30s")
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.keys.Delete(keyAll)
	select {
	case err := <-done:
		if !errors.Is(err, worker.ErrRefused) {
			t.Fatalf("after the key was revoked Connect returned %v, want ErrRefused", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Connect still running 30s after its key was revoked")
	}
}

// TestHandlerContextEndsWithTheLease: a pull handler's context ends when
// sluice gives up on the job, as worker.Handler promises: when its lease
// times out with no answer or extend. It did not: the handler ran on,
// holding a slot, while sluice redelivered its job (found in review). A
// handler that extends keeps its context. After a timed-out lease the
// worker still gets the job again (the hub does not leave it silent).
func TestHandlerContextEndsWithTheLease(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	ended := make(chan string, 10)
	c := newCollector(nil)
	handler := func(ctx context.Context, j worker.Job) error {
		_ = c.handle(ctx, j)
		switch {
		case j.Attempt > 1:
			return nil
		case strings.HasPrefix(j.ID, "silent"):
			select {
			case <-ctx.Done():
				ended <- j.ID
				return ctx.Err()
			case <-time.After(20 * time.Second):
				return errors.New("the context outlived the lease by 19s")
			}
		default: // extends, past the 1s lease, in each form
			for i := range 6 {
				select {
				case <-ctx.Done():
					ended <- j.ID
					return ctx.Err()
				case <-time.After(300 * time.Millisecond):
				}
				worker.Extend(ctx, []time.Duration{0, -time.Second, 2 * time.Second}[i%3])
			}
			return nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, r.addr, keyAll, handler, worker.ConnectOptions{Concurrency: 2, Logger: topotest.QuietLog})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Connect: %v", err)
		}
	})
	r.enqueue(t, "std", "silent", 1)
	r.enqueue(t, "std", "extends", 1)
	select {
	case id := <-ended:
		if id != "silent-0" {
			t.Fatalf("the context of %s ended; it extended its lease", id)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the silent job's context had not ended 15s after its 1s lease")
	}
	topotest.WaitFor(t, func() bool { return r.d.Counts().Delivered == 2 })
	if got := c.of("silent-0"); len(got) != 2 || got[1] != 2 {
		t.Errorf("the timed-out job's attempts %v, want [1 2]", got)
	}
	if got := c.of("extends-0"); len(got) != 1 {
		t.Errorf("the extended job's attempts %v, want [1]", got)
	}
	select {
	case id := <-ended:
		t.Errorf("the context of %s ended too", id)
	default:
	}
}

// TestLongDelays: a pull handler's RetryAfter, or Extend, longer than
// the 12h a result's delay may say is taken at 12h: a retry at the
// longest delay sluice allows (as for a pushed job; the drainer caps
// delays at 900s anyway), a lease kept for 12h. worker.Connect sent the
// delay as asked and the hub refused the result as malformed: the retry
// sat unanswered until its lease timed out (15 minutes by default), its
// error lost, and the extended job's lease timed out as if never
// extended (found in review).
func TestLongDelays(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	c := newCollector(nil)
	handler := func(ctx context.Context, j worker.Job) error {
		_ = c.handle(ctx, j)
		if strings.HasPrefix(j.ID, "tomorrow") {
			return worker.RetryAfter(errors.New("upstream down until tomorrow"), 48*time.Hour)
		}
		worker.Extend(ctx, 24*time.Hour)
		time.Sleep(1500 * time.Millisecond) // the work, past the 1s lease
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Connect(ctx, r.addr, keyAll, handler, worker.ConnectOptions{Concurrency: 2, Logger: topotest.QuietLog})
	}()
	t.Cleanup(func() { cancel(); <-done })
	r.enqueue(t, "std", "tomorrow", 1)
	r.enqueue(t, "std", "extended", 1)
	deadline := time.Now().Add(15 * time.Second)
	for c := r.d.Counts(); c.Retried < 1 || c.Delivered < 1; c = r.d.Counts() {
		if time.Now().After(deadline) {
			t.Fatalf("15s on, want the retry and the extended job's ack: %+v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c := r.d.Counts(); c.Retried != 1 || c.Delivered != 1 {
		t.Errorf("%+v, want 1 retried (tomorrow) and 1 delivered (extended)", c)
	}
	if got := c.of("extended-0"); len(got) != 1 {
		t.Errorf("the extended job's attempts %v, want [1]", got)
	}
}

// TestStuckHandlerDoesNotStarveTheWorker: a handler that ignores its
// context and never returns holds its own slot, not the worker's others.
// When its lease times out the hub stops sending jobs to the worker
// until it answers again; Connect answered only when the handler
// returned, so one stuck handler left every other slot idle for good
// (found in review). Now the lease's end is answered at once.
func TestStuckHandlerDoesNotStarveTheWorker(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	unstick := make(chan struct{})
	defer close(unstick)
	c := newCollector(func(j worker.Job) error {
		if strings.HasPrefix(j.ID, "stuck") && j.Attempt == 1 {
			<-unstick // ignores its context
		}
		return nil
	})
	r.run(t, keyAll, c, worker.ConnectOptions{Concurrency: 4})
	r.enqueue(t, "std", "stuck", 1)
	deadline := time.Now().Add(15 * time.Second)
	for r.d.Counts().Retried < 1 { // the stuck job's lease timed out
		if time.Now().After(deadline) {
			t.Fatal("the stuck job's lease did not time out in 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.enqueue(t, "std", "next", 3)
	for c := r.d.Counts(); c.Delivered < 4; c = r.d.Counts() {
		if time.Now().After(deadline) {
			t.Fatalf("15s on, the worker with 3 free slots got %d of 4 jobs (the stuck one's retry and 3 more): %+v", c.Delivered, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestJobGoesToItsQueuesLane: a job goes to a worker serving the lane
// whose queue it was read from, whatever lane its envelope names. The hub
// placed it by the envelope's lane: a job on std's queue whose envelope
// named gold went to a worker whose key may serve gold only, and one
// naming no lane (a producer other than the gateway) found no worker,
// was handed back every second and, once past max_receive_count, was
// dead-lettered without an attempt.
func TestJobGoesToItsQueuesLane(t *testing.T) {
	t.Parallel()
	for _, envLane := range []string{"gold", ""} {
		t.Run("envelope lane "+strconv.Quote(envLane), func(t *testing.T) {
			t.Parallel()
			r := newRig(t, time.Minute)
			gold := r.connect(t, keyGold, 10, "gold")
			std := r.connect(t, keyAll, 10, "std")
			e := topotest.Envelope("acme", "j", time.Now())
			e.Lane = envLane
			r.b.Enqueue(t, r.b.Topo.ShardQueue("std", 0), e)
			select {
			case m := <-gold.msgs:
				t.Fatalf("a job of std's queue went to the gold-only worker: %v", m)
			case m := <-std.msgs:
				jobs := m.GetJobs().GetJobs()
				if len(jobs) != 1 || jobs[0].GetLane() != "std" {
					t.Fatalf("std's worker got %v, want the job, of lane std", m)
				}
				std.results(ack(jobs[0].GetLease()))
			case <-time.After(10 * time.Second):
				t.Fatal("the job reached no worker in 10s")
			}
		})
	}
}
