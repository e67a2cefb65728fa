package reliability

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// FaultConfig sizes a backend-fault run.
type FaultConfig struct {
	// Phase is how long each fault phase lasts.
	Phase time.Duration
	// Rate is the jobs per second offered; Callers the goroutines.
	Rate    float64
	Callers int
	// Concurrency is each drainer's delivery concurrency.
	Concurrency  int
	DrainTimeout time.Duration
}

// FaultPhase is one stretch of a fault run: which faults, how often.
type FaultPhase struct {
	Name   string  `json:"name"`
	Faults []Fault `json:"faults"`
	Prob   float64 `json:"prob"`
	// Outage marks a phase in which every call fails: the drainers must
	// back off then.
	Outage bool `json:"outage"`
	// Receives is the ReceiveMessage requests per second per poller seen
	// during the phase (a poller that did not back off would make
	// hundreds).
	Receives float64 `json:"receives_per_poller_s"`
}

// faultPhases is the schedule: each fault alone, a total outage, then
// all of them at once.
func faultPhases() []FaultPhase {
	return []FaultPhase{
		{Name: "latency 50-400ms on every call", Faults: []Fault{FaultLatency}, Prob: 1},
		{Name: "connection resets before the server", Faults: []Fault{FaultResetBefore}, Prob: 0.3},
		{Name: "connection resets after the server acted", Faults: []Fault{FaultResetAfter}, Prob: 0.3},
		{Name: "hung calls (caller timeouts)", Faults: []Fault{FaultHang}, Prob: 0.15},
		{Name: "HTTP 500 InternalError", Faults: []Fault{Fault500}, Prob: 0.3},
		{Name: "HTTP 503 on every call (outage)", Faults: []Fault{Fault503}, Prob: 1, Outage: true},
		{Name: "throttling (RequestThrottled, ThrottlingException)", Faults: []Fault{FaultThrottle}, Prob: 0.5},
		{Name: "partial batch failures", Faults: []Fault{FaultPartial}, Prob: 0.5},
		{Name: "all of the above mixed", Faults: AllFaults, Prob: 0.3},
	}
}

// FaultResult is the outcome of a backend-fault run.
type FaultResult struct {
	Phases   []FaultPhase    `json:"phases"`
	Injected map[Fault]int64 `json:"injected"`
	Requests int64           `json:"requests"` // requests through the proxy
	Load     LoadStats       `json:"load"`
	// P99 and Max are Submit's latencies under the faults.
	P99      time.Duration    `json:"p99"`
	Max      time.Duration    `json:"max"`
	Drainers map[string]int64 `json:"drainers"` // summed "drainer stopped" counts
	// DrainerExits counts drainer or gateway processes that exited during
	// the faults (each is a failure: they must ride faults out).
	Exits   int           `json:"exits"`
	Drain   time.Duration `json:"drain"`
	Elapsed time.Duration `json:"elapsed"`
	Accounting
	Left     Leftovers `json:"left"`
	Problems []string  `json:"problems"`
}

// allowedUnderFaults are the codes Submit may answer while the backend
// fails: UNAVAILABLE (not stored, retry) and RESOURCE_EXHAUSTED.
var allowedUnderFaults = map[string]bool{codes.OK.String(): true, codes.Unavailable.String(): true, codes.ResourceExhausted.String(): true}

// RunFaults puts the fault proxy between a gateway and two drainers and
// the SQS-compatible server, runs load through each fault phase, then
// stops the faults and checks that every acknowledged job arrives.
func RunFaults(ctx context.Context, env *Env, cfg FaultConfig) (*FaultResult, error) {
	res := &FaultResult{}
	endpoint, err := env.SQSEndpoint(ctx)
	if err != nil {
		return nil, err
	}
	proxy, err := StartFaultProxy(endpoint)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	c, err := newCluster(ctx, env, 20*time.Millisecond, testcluster.ClusterConfig{
		Name: "faults", Backend: testcluster.SQS, SQSEndpoint: proxy.URL(), Drainers: 2,
		Queues: fmt.Sprintf(crashQueuesYAML, queuePrefix("f")), Tenants: crashTenantsYAML,
		Concurrency: cfg.Concurrency, Args: drainFlags,
	})
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	pollers := 0
	for _, q := range c.Topology.Queues() {
		if q.Kind != "dlq" {
			pollers += 2 // one per drainer
		}
	}

	ledger := &Ledger{}
	// The drain-limited tenant (cask) too: its sidelined jobs are
	// deferred, and the faults inflate their receive counts (see Findings:
	// the deferral is capped).
	lc := crashLoad(c.Addr, cfg.Callers, cfg.Rate)
	lc.KeepLatency = true
	load, err := NewLoad(lc, ledger)
	if err != nil {
		return nil, err
	}
	defer load.Close()
	start := time.Now()
	stopLoad := load.Start(ctx)

	for _, ph := range faultPhases() {
		before, _ := proxy.Ops()
		t0 := time.Now()
		proxy.Set(ph.Faults, ph.Prob)
		if !sleepCtx(ctx, cfg.Phase) {
			break
		}
		after, _ := proxy.Ops()
		ph.Receives = float64(after["ReceiveMessage"]-before["ReceiveMessage"]) / time.Since(t0).Seconds() / float64(pollers)
		res.Phases = append(res.Phases, ph)
		env.logf("faults: %s: %.2f receives/s per poller", ph.Name, ph.Receives)
	}
	proxy.Set(nil, 0)
	// Load goes on a little without faults, then stops.
	sleepCtx(ctx, cfg.Phase)
	stopLoad()
	res.Load = load.Stats()
	res.P99, res.Max = res.Load.Percentile(99), res.Load.Percentile(100)
	res.Load.Latencies = nil
	res.Injected = proxy.Injected()
	for _, n := range c.Roles() {
		if p := c.Proc(n); p.Exited() {
			res.Exits++
			res.Problems = append(res.Problems, fmt.Sprintf("%s exited during the faults: %v; last lines: %s", n, p.Err(), p.Tail(3)))
		}
	}

	res.Drain = c.drainAndStop(ctx, ledger, cfg.DrainTimeout, &res.Problems)
	res.Elapsed = time.Since(start)
	_, res.Requests = proxy.Ops()
	res.Drainers = map[string]int64{}
	for _, n := range c.Roles() {
		if l := c.Proc(n).Find("drainer stopped"); l != nil {
			for k, v := range l {
				if f, ok := v.(float64); ok {
					res.Drainers[k] += int64(f)
				}
			}
		}
	}
	if err := c.account(ctx, ledger, &res.Accounting, &res.Left, &res.Problems); err != nil {
		return res, err
	}
	for _, code := range slices.Sorted(maps.Keys(res.Load.Codes)) {
		if !allowedUnderFaults[code] {
			res.Problems = append(res.Problems, fmt.Sprintf("Submit answered %s %d times under backend faults (want only OK, UNAVAILABLE, RESOURCE_EXHAUSTED)", code, res.Load.Codes[code]))
		}
	}
	for _, ph := range res.Phases {
		// In an outage a poller waits 1 s after the SDK's own attempts (3,
		// with backoff): a few receives a second at most. (With the backend
		// up, a long poll returns at each arrival, so the rate follows the
		// load.)
		if ph.Outage && ph.Receives > 5 {
			res.Problems = append(res.Problems, fmt.Sprintf("phase %q: %.1f ReceiveMessage calls/s per poller: the drainers do not back off", ph.Name, ph.Receives))
		}
	}
	return res, nil
}

// FaultNames joins a phase's fault kinds.
func FaultNames(fs []Fault) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}
