package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	reg   *prometheus.Registry
	clock *fakeClock
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func setup(t *testing.T, opts Options) (*Metrics, *testBundle) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m := New(reg, opts)
	clock := &fakeClock{now: time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)}
	m.tenants.now = clock.Now
	return m, &testBundle{reg: reg, clock: clock}
}

// labelValues returns the distinct values of label across the series of
// the named family.
func labelValues(t *testing.T, g prometheus.Gatherer, name, label string) []string {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					seen[lp.GetValue()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// sumFamily adds up the counter values of the named family.
func sumFamily(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func TestNilMetrics(t *testing.T) {
	t.Parallel()
	var m *Metrics
	m.Submit("acme", "premium", "premium", OutcomeAdmitted)
	m.EnqueueLatency("premium", time.Millisecond)
	m.QueueDepth("q", "premium", "shard", 1, 2, 3, time.Second)
	m.Drain("premium", ActionDelivered, "within_limits")
	m.Dwell("premium", time.Second)
	m.AgeOfFirstAttempt("premium", time.Second)
	m.BackendCall("SendMessageBatch", 1)
}

func TestNilRegisterer(t *testing.T) {
	t.Parallel()
	m := New(nil, Options{})
	m.Submit("acme", "premium", "premium", OutcomeAdmitted)
	if got := testutil.ToFloat64(m.submitted.WithLabelValues("acme", "premium", "premium", OutcomeAdmitted)); got != 1 {
		t.Errorf("unregistered counter = %v, want 1", got)
	}
}

// TestSubmitN: a call's jobs counted at once add up as one by one would.
func TestSubmitN(t *testing.T) {
	t.Parallel()
	m := New(nil, Options{})
	m.SubmitN("acme", "premium", "premium", OutcomeAdmitted, 100)
	m.SubmitN("acme", "premium", "premium", OutcomeAdmitted, 0)
	m.Submit("acme", "premium", "premium", OutcomeAdmitted)
	if got := testutil.ToFloat64(m.submitted.WithLabelValues("acme", "premium", "premium", OutcomeAdmitted)); got != 101 {
		t.Errorf("counter = %v, want 101", got)
	}
	if e := m.tenants.labeled["acme"]; e == nil || e.count != 101 {
		t.Errorf("tracker's count for acme: %+v, want 101", e)
	}
}

func TestLint(t *testing.T) {
	t.Parallel()
	m, bundle := setup(t, Options{})
	// Touch every family so each has a series to lint.
	m.Submit("acme", "premium", "premium", OutcomeAdmitted)
	m.EnqueueLatency("premium", time.Millisecond)
	m.QueueDepth("sluice-premium-shard-00", "premium", "shard", 1, 2, 3, time.Second)
	m.Drain("premium", ActionDelivered, "within_limits")
	m.Dwell("premium", time.Second)
	m.AgeOfFirstAttempt("premium", time.Second)
	m.BackendCall("SendMessageBatch", 1)
	m.TenantConfigReload(true)
	m.TenantConfigReload(false)
	problems, err := testutil.GatherAndLint(bundle.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	n, err := testutil.GatherAndCount(bundle.reg)
	if err != nil {
		t.Fatal(err)
	}
	// 1 submit + 1 histogram + 4 gauges + 1 drain + 2 histograms + 1 call
	// + 2 reload results.
	if n != 12 {
		t.Errorf("series = %d, want 12", n)
	}
}

func TestSubmit(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name                        string
		tenant, tier, lane, outcome string
		wantTenant, wantOutcome     string
	}{
		{"admitted", "acme", "premium", "premium", OutcomeAdmitted, "acme", OutcomeAdmitted},
		{"throttled by rate", "acme", "premium", "premium", OutcomeThrottledRate, "acme", OutcomeThrottledRate},
		{"throttled by backlog", "tiny", "free", "free", OutcomeThrottledBacklog, "tiny", OutcomeThrottledBacklog},
		{"unauthenticated has no tenant", "", "", "", OutcomeUnauthenticated, OtherValue, OutcomeUnauthenticated},
		{"unknown outcome", "acme", "premium", "premium", "exploded", "acme", OtherValue},
		{"tenant named other", OtherValue, "free", "free", OutcomeAdmitted, OtherValue, OutcomeAdmitted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := setup(t, Options{})
			m.Submit(tt.tenant, tt.tier, tt.lane, tt.outcome)
			m.Submit(tt.tenant, tt.tier, tt.lane, tt.outcome)
			c := m.submitted.WithLabelValues(tt.wantTenant, tt.tier, tt.lane, tt.wantOutcome)
			if got := testutil.ToFloat64(c); got != 2 {
				t.Errorf("jobs_submitted{tenant=%q,outcome=%q} = %v, want 2", tt.wantTenant, tt.wantOutcome, got)
			}
			if n := testutil.CollectAndCount(m.submitted); n != 1 {
				t.Errorf("series = %d, want 1", n)
			}
		})
	}
}

func TestTopTenants(t *testing.T) {
	t.Parallel()

	t.Run("10000 tenants: at most K+1 label values, heavy hitters labeled", func(t *testing.T) {
		t.Parallel()
		const k = 20
		m, bundle := setup(t, Options{TopTenants: k})
		heavy := []string{"heavy-a", "heavy-b", "heavy-c", "heavy-d", "heavy-e"}
		total := 0
		submit := func(tenant string) {
			m.Submit(tenant, "standard", "standard", OutcomeAdmitted)
			total++
		}
		for i := range 10_000 {
			submit(fmt.Sprintf("tenant-%05d", i))
			if i%10 == 0 {
				for _, h := range heavy {
					submit(h)
				}
			}
			if i%2500 == 2499 {
				bundle.clock.Advance(TenantRefreshDefault)
			}
			if i%500 == 0 {
				if got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant"); len(got) > k+1 {
					t.Fatalf("after %d tenants: %d tenant label values, want ≤ %d", i, len(got), k+1)
				}
			}
		}
		got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant")
		if len(got) > k+1 {
			t.Errorf("%d tenant label values, want ≤ %d: %v", len(got), k+1, got)
		}
		labeled := m.tenants.labels()
		for _, h := range heavy {
			if !slices.Contains(labeled, h) || !slices.Contains(got, h) {
				t.Errorf("heavy hitter %s not labeled: %v", h, labeled)
			}
		}
		if n := len(m.tenants.labeled) + len(m.tenants.cands); n > k+m.tenants.capacity {
			t.Errorf("tracker holds %d entries, want ≤ %d", n, k+m.tenants.capacity)
		}
		// Deleted series lose what they counted; everything else is there.
		if sum := sumFamily(t, bundle.reg, NameJobsSubmitted); sum > float64(total) || sum < float64(total)*0.9 {
			t.Errorf("sum over series = %v, want between 90%% and 100%% of %d", sum, total)
		}
	})

	t.Run("at most K tenants are each counted exactly", func(t *testing.T) {
		t.Parallel()
		m, bundle := setup(t, Options{TopTenants: 3})
		want := map[string]int{"a": 5, "b": 1, "c": 3}
		for tenant, n := range want {
			for range n {
				m.Submit(tenant, "free", "free", OutcomeAdmitted)
				bundle.clock.Advance(TenantRefreshDefault / 2) // refreshes change nothing
			}
		}
		for tenant, n := range want {
			if got := testutil.ToFloat64(m.submitted.WithLabelValues(tenant, "free", "free", OutcomeAdmitted)); got != float64(n) {
				t.Errorf("%s: %v, want %d", tenant, got, n)
			}
		}
		if got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant"); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Errorf("tenant values = %v", got)
		}
	})

	t.Run("the label follows recent volume", func(t *testing.T) {
		t.Parallel()
		m, bundle := setup(t, Options{TopTenants: 1})
		for range 100 {
			m.Submit("early", "free", "free", OutcomeAdmitted)
			m.Submit("late", "free", "free", OutcomeAdmitted)
			m.Submit("late", "free", "free", OutcomeAdmitted)
		}
		// "early" was seen first and got the free slot; at the first
		// refresh, "late" (200) beats it (100).
		if got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant"); !slices.Equal(got, []string{"early", OtherValue}) {
			t.Fatalf("before refresh: %v", got)
		}
		bundle.clock.Advance(TenantRefreshDefault)
		m.Submit("late", "free", "free", OutcomeAdmitted)
		if got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant"); !slices.Equal(got, []string{"late", OtherValue}) {
			t.Fatalf("after refresh: %v", got)
		}
		// Now "early" comes back at ten times the rate; the old counts
		// halve at every refresh, so it takes over within a few.
		for range 5 {
			for range 1000 {
				m.Submit("early", "free", "free", OutcomeAdmitted)
			}
			m.Submit("late", "free", "free", OutcomeAdmitted)
			bundle.clock.Advance(TenantRefreshDefault)
		}
		m.Submit("early", "free", "free", OutcomeAdmitted)
		if got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant"); !slices.Equal(got, []string{"early", OtherValue}) {
			t.Fatalf("after the shift: %v", got)
		}
	})

	// Volumes halve at every refresh period, idle ones included: a
	// refresh runs only on a submit, and after an idle hour the counts
	// halved once, not sixty times, so yesterday's heaviest tenant kept
	// its label for many minutes over today's.
	t.Run("idle periods decay the volumes too", func(t *testing.T) {
		t.Parallel()
		m, bundle := setup(t, Options{TopTenants: 1})
		m.Submit("yesterday", "free", "free", OutcomeAdmitted)
		for range 100_000 {
			m.Submit("yesterday", "free", "free", OutcomeAdmitted)
		}
		bundle.clock.Advance(time.Hour) // nothing submitted
		for range 2 {
			for range 100 {
				m.Submit("today", "free", "free", OutcomeAdmitted)
			}
			bundle.clock.Advance(TenantRefreshDefault)
		}
		m.Submit("today", "free", "free", OutcomeAdmitted)
		if got := m.tenants.labels(); !slices.Equal(got, []string{"today"}) {
			t.Fatalf("labeled %v two minutes after an idle hour, want [today]", got)
		}
	})

	t.Run("negative K labels no tenant", func(t *testing.T) {
		t.Parallel()
		m, bundle := setup(t, Options{TopTenants: -1})
		m.Submit("acme", "free", "free", OutcomeAdmitted)
		if got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant"); !slices.Equal(got, []string{OtherValue}) {
			t.Errorf("tenant values = %v", got)
		}
	})
}

// TestTopTenantsConcurrent runs submits and refreshes together; with -race
// it checks the locking, and the bound must hold throughout.
func TestTopTenantsConcurrent(t *testing.T) {
	t.Parallel()
	const k = 5
	m, bundle := setup(t, Options{TopTenants: k})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				m.Submit(fmt.Sprintf("t-%d", (i*7+g)%300), "free", "free", OutcomeAdmitted)
				if i%100 == 0 {
					bundle.clock.Advance(TenantRefreshDefault)
				}
			}
		})
	}
	wg.Wait()
	if got := labelValues(t, bundle.reg, NameJobsSubmitted, "tenant"); len(got) > k+1 {
		t.Errorf("%d tenant label values, want ≤ %d: %v", len(got), k+1, got)
	}
}

func TestDrain(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name                   string
		action, reason         string
		wantAction, wantReason string
	}{
		{"delivered", ActionDelivered, "within_limits", ActionDelivered, "within_limits"},
		{"spilled", ActionSpilled, "over_rate", ActionSpilled, "over_rate"},
		{"no reason", ActionLeaseLost, "", ActionLeaseLost, ""},
		{"detail cut off", ActionDeadLettered, "permanent_failure: rpc error: code = InvalidArgument desc = bad", ActionDeadLettered, "permanent_failure"},
		{"unknown action", "vanished", "stale", OtherValue, "stale"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, _ := setup(t, Options{})
			m.Drain("standard", tt.action, tt.reason)
			if got := testutil.ToFloat64(m.drainActions.WithLabelValues("standard", tt.wantAction, tt.wantReason)); got != 1 {
				t.Errorf("drain_actions{action=%q,reason=%q} = %v, want 1", tt.wantAction, tt.wantReason, got)
			}
		})
	}
}

func TestBoundedLabels(t *testing.T) {
	t.Parallel()
	m, bundle := setup(t, Options{})
	for i := range maxOperations + 10 {
		m.BackendCall(fmt.Sprintf("Op%d", i), 2)
	}
	m.BackendCall("Op0", 0) // nothing
	m.BackendCall(strings.Repeat("x", maxValueLen+1), 1)
	if got := labelValues(t, bundle.reg, NameBackendCalls, "operation"); len(got) != maxOperations+1 {
		t.Errorf("%d operation values, want %d", len(got), maxOperations+1)
	}
	if got := testutil.ToFloat64(m.backendCalls.WithLabelValues(OtherValue)); got != 2*10+1 {
		t.Errorf("other = %v, want 21", got)
	}
	if got := testutil.ToFloat64(m.backendCalls.WithLabelValues("Op0")); got != 2 {
		t.Errorf("Op0 = %v, want 2", got)
	}
}

func TestQueueDepth(t *testing.T) {
	t.Parallel()
	m, bundle := setup(t, Options{})
	m.QueueDepth("sluice-free-dlq", "free", "dlq", 7, 1, 2, 90*time.Second)
	m.QueueDepth("sluice-free-dlq", "free", "dlq", 3, 0, 0, 30*time.Second) // replaces
	want := `
# HELP sluice_queue_delayed_messages Messages sent with a delay that has not yet passed, per queue.
# TYPE sluice_queue_delayed_messages gauge
sluice_queue_delayed_messages{kind="dlq",lane="free",queue="sluice-free-dlq"} 0
# HELP sluice_queue_in_flight_messages Messages received and not yet deleted or expired, per queue.
# TYPE sluice_queue_in_flight_messages gauge
sluice_queue_in_flight_messages{kind="dlq",lane="free",queue="sluice-free-dlq"} 0
# HELP sluice_queue_oldest_message_age_seconds Age of the oldest message per queue; 0 when empty or unknown.
# TYPE sluice_queue_oldest_message_age_seconds gauge
sluice_queue_oldest_message_age_seconds{kind="dlq",lane="free",queue="sluice-free-dlq"} 30
# HELP sluice_queue_visible_messages Messages ready to be received, per queue (approximate on SQS).
# TYPE sluice_queue_visible_messages gauge
sluice_queue_visible_messages{kind="dlq",lane="free",queue="sluice-free-dlq"} 3
`
	if err := testutil.GatherAndCompare(bundle.reg, strings.NewReader(want),
		NameQueueVisible, NameQueueInFlight, NameQueueDelayed, NameQueueOldestAge); err != nil {
		t.Error(err)
	}
}

func TestHistograms(t *testing.T) {
	t.Parallel()
	m, bundle := setup(t, Options{})
	m.EnqueueLatency("premium", 3*time.Millisecond)
	m.EnqueueLatency("premium", 20*time.Millisecond)
	m.Dwell("premium", 2*time.Second)
	m.Dwell("premium", 40*time.Second)
	m.AgeOfFirstAttempt("premium", 2*time.Second)

	fams, err := bundle.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.Histogram{}
	for _, f := range fams {
		if f.GetType() == dto.MetricType_HISTOGRAM {
			got[f.GetName()] = f.GetMetric()[0].GetHistogram()
		}
	}
	tests := []struct {
		name      string
		wantCount uint64
		wantSum   float64
	}{
		{NameEnqueueLatency, 2, 0.023},
		{NameDwell, 2, 42},
		{NameAgeOfFirstAttempt, 1, 2},
	}
	for _, tt := range tests {
		h := got[tt.name]
		if h.GetSampleCount() != tt.wantCount || fmt.Sprintf("%.6f", h.GetSampleSum()) != fmt.Sprintf("%.6f", tt.wantSum) {
			t.Errorf("%s: count %d sum %v, want %d and %v", tt.name, h.GetSampleCount(), h.GetSampleSum(), tt.wantCount, tt.wantSum)
		}
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	m, bundle := setup(t, Options{})
	m.Submit("acme", "premium", "premium", OutcomeAdmitted)
	srv := httptest.NewServer(Handler(bundle.reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := `sluice_jobs_submitted_total{lane="premium",outcome="admitted",tenant="acme",tier="premium"} 1`
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		t.Errorf("status %d, body:\n%s\nwant a line %s", resp.StatusCode, body, want)
	}
}

// BenchmarkSubmit measures the gateway's per-call cost. Sample (2 cores,
// two runs):
//
//	BenchmarkSubmit/10_tenants-2        221–511 ns/op
//	BenchmarkSubmit/100000_tenants-2    356–857 ns/op
func BenchmarkSubmit(b *testing.B) {
	for _, n := range []int{10, 100_000} {
		b.Run(fmt.Sprintf("%d_tenants", n), func(b *testing.B) {
			m := New(prometheus.NewRegistry(), Options{})
			tenants := make([]string, n)
			for i := range tenants {
				tenants[i] = fmt.Sprintf("tenant-%06d", i)
			}
			i := 0
			for b.Loop() {
				m.Submit(tenants[i%n], "standard", "standard", OutcomeAdmitted)
				i++
			}
		})
	}
}

// TestIdleLaneDropsItsFairnessGauges: when a lane goes idle the scheduler
// reports utilization and Jain's index as unknown, and the series go away;
// they kept the last busy period's values, which the dashboard showed as
// current for ever (found in review).
func TestIdleLaneDropsItsFairnessGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := New(reg, Options{})
	m.Fairness("premium", 0.3, 0.4, 5, []TenantShare{{Tenant: "a", State: "in_share", Share: 1}})
	if n := testutil.CollectAndCount(m.drainUtilization) + testutil.CollectAndCount(m.drainFairness); n != 2 {
		t.Fatalf("%d series while busy, want 2", n)
	}
	m.Fairness("premium", -1, -1, 0, nil)
	if n := testutil.CollectAndCount(m.drainUtilization) + testutil.CollectAndCount(m.drainFairness); n != 0 {
		t.Errorf("%d utilization and fairness series left after the lane went idle, want 0", n)
	}
}

// TestCountersStartAtZero: the reload results, and the drain series a
// drainer names, exist at 0 before anything is counted, so that the first
// count is an increase rate() and increase() see: a series that first
// appears at 1 shows none, and an alert on the first refused reload never
// fired (found in a walkthrough).
func TestCountersStartAtZero(t *testing.T) {
	t.Parallel()
	m, b := setup(t, Options{})
	m.DrainSeries("standard", [][2]string{{ActionDelivered, ""}, {ActionDeadLettered, "attempts_exhausted"}, {"vanished", ""}})
	want := map[string]bool{
		`sluice_tenant_config_reloads_total{result="ok"}`:                                                true,
		`sluice_tenant_config_reloads_total{result="refused"}`:                                           true,
		`sluice_drain_actions_total{action="delivered",lane="standard",reason=""}`:                       true,
		`sluice_drain_actions_total{action="dead_lettered",lane="standard",reason="attempts_exhausted"}`: true,
	}
	fams, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			got = append(got, name)
			if want[name] && s.GetCounter().GetValue() != 0 {
				t.Errorf("%s = %v, want 0", name, s.GetCounter().GetValue())
			}
			delete(want, name)
		}
	}
	for name := range want {
		t.Errorf("no series %s; have %q", name, got)
	}
	if slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "vanished") || strings.Contains(s, OtherValue) }) {
		t.Errorf("an unknown action made a series: %q", got)
	}
}
