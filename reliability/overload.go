package reliability

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// OverloadConfig sizes an overload run.
type OverloadConfig struct {
	// Tenants is the number of tenants, each with SubmitRate jobs/s (and a
	// burst of as many): the gateway's configured admission capacity is
	// Tenants × SubmitRate.
	Tenants    int
	SubmitRate float64
	// Factor is the offered load as a multiple of the capacity (10).
	Factor float64
	// Duration of the overload.
	Duration time.Duration
	// Callers is the number of goroutines offering it.
	Callers int
	// RSSBound is the most resident memory the gateway may use.
	RSSBound int64
	// MinOffered is the least share of Factor × capacity the client must
	// achieve for the run to count. Defaults to 0.8; the short test,
	// sharing the CPU with the race detector and other packages' tests,
	// asks less.
	MinOffered float64
}

// OverloadResult is the outcome of an overload run.
type OverloadResult struct {
	Tenants  int           `json:"tenants"`
	Capacity float64       `json:"capacity"` // jobs/s admitted by configuration
	Offered  float64       `json:"offered"`  // jobs/s the client achieved
	Admitted float64       `json:"admitted"` // OK jobs/s
	Duration time.Duration `json:"duration"`
	Load     LoadStats     `json:"load"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
	Max      time.Duration `json:"max"`
	// RSS of the gateway: before the load, its peak during, and after.
	RSSBefore int64 `json:"rss_before"`
	RSSPeak   int64 `json:"rss_peak"`
	RSSAfter  int64 `json:"rss_after"`
	RSSBound  int64 `json:"rss_bound"`
	// Recovery is the time from the end of the load until every tenant
	// had a Submit accepted again, with the same gateway process.
	Recovery time.Duration `json:"recovery"`
	Restarts int           `json:"restarts"`
	Accounting
	Problems []string `json:"problems"`
}

// RunOverload offers Factor times the configured capacity from many
// tenants for a bounded time to one gateway (embedded backend, draining
// in-process), and checks that it answers every call promptly with OK or
// RESOURCE_EXHAUSTED and a RetryInfo, that its memory stays under the
// bound, and that it serves normally as soon as the load ends.
func RunOverload(ctx context.Context, env *Env, cfg OverloadConfig) (*OverloadResult, error) {
	res := &OverloadResult{Tenants: cfg.Tenants, Capacity: float64(cfg.Tenants) * cfg.SubmitRate, RSSBound: cfg.RSSBound}
	var tenants strings.Builder
	tenants.WriteString("tenants:\n")
	keys := make([]string, cfg.Tenants)
	for i := range cfg.Tenants {
		keys[i] = fmt.Sprintf("rel-overload-key-%04d", i)
		fmt.Fprintf(&tenants, "  - {id: t%04d, tier: standard, api_keys: [%s], submit_rate: %g, submit_burst: %d, drain_rate: 1000, drain_burst: 1000}\n",
			i, keys[i], cfg.SubmitRate, max(1, int(cfg.SubmitRate)))
	}
	c, err := newCluster(ctx, env, 0, testcluster.ClusterConfig{
		Name: "overload", Backend: testcluster.Embedded, Queues: fmt.Sprintf(crashQueuesYAML, "overload"), Tenants: tenants.String(), Concurrency: 32,
	})
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	gw := c.Proc("gateway")
	ledger := &Ledger{}
	// A few calls first, so the baseline includes a warm gateway.
	for _, k := range keys[:min(len(keys), 5)] {
		if err := ledger.Probe(ctx, c.Addr, k, 64, time.Minute); err != nil {
			return nil, fmt.Errorf("warm-up submit: %w", err)
		}
	}
	if res.RSSBefore, err = gw.RSS(); err != nil {
		return nil, err
	}

	load, err := NewLoad(LoadConfig{
		Addr: c.Addr, Keys: keys, Callers: cfg.Callers, Conns: 4,
		Rate: cfg.Factor * res.Capacity, PayloadSize: 256, CallTimeout: 5 * time.Second, KeepLatency: true,
	}, ledger)
	if err != nil {
		return nil, err
	}
	defer load.Close()
	loadCtx, endLoad := context.WithTimeout(ctx, cfg.Duration)
	defer endLoad()
	start := time.Now()
	stopLoad := load.Start(loadCtx)
	tick := time.NewTicker(100 * time.Millisecond)
	for loadCtx.Err() == nil {
		select {
		case <-tick.C:
			if rss, err := gw.RSS(); err == nil {
				res.RSSPeak = max(res.RSSPeak, rss)
			}
		case <-loadCtx.Done():
		}
	}
	tick.Stop()
	stopLoad()
	res.Duration = time.Since(start)
	res.Load = load.Stats()
	secs := cfg.Duration.Seconds()
	res.Offered = float64(res.Load.Jobs) / secs
	res.Admitted = float64(res.Load.Count(codes.OK)) / secs
	res.P50, res.P99, res.Max = res.Load.Percentile(50), res.Load.Percentile(99), res.Load.Percentile(100)
	res.Load.Latencies = nil

	// Recovery: every tenant gets a Submit accepted, same process.
	t0 := time.Now()
	pending := slices.Clone(keys)
	for len(pending) > 0 && time.Since(t0) < time.Minute {
		var still []string
		for _, k := range pending {
			if ledger.Probe(ctx, c.Addr, k, 64, 5*time.Second) != nil {
				still = append(still, k)
			}
		}
		pending = still
		if len(pending) > 0 {
			sleepCtx(ctx, 50*time.Millisecond)
		}
	}
	res.Recovery = time.Since(t0)
	if len(pending) > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d tenants still refused a minute after the load ended", len(pending)))
	}
	if gw.Exited() {
		res.Restarts = 1
		res.Problems = append(res.Problems, "the gateway exited under overload: "+gw.Tail(3))
	}
	sleepCtx(ctx, 2*time.Second)
	if rss, err := gw.RSS(); err == nil {
		res.RSSAfter = rss
	}

	c.drainAndStop(ctx, ledger, 2*time.Minute, &res.Problems)
	var left Leftovers
	if err := c.account(ctx, ledger, &res.Accounting, &left, &res.Problems); err != nil {
		return res, err
	}

	for _, code := range slices.Sorted(maps.Keys(res.Load.Codes)) {
		if code != codes.OK.String() && code != codes.ResourceExhausted.String() {
			res.Problems = append(res.Problems, fmt.Sprintf("%d answers were %s (want only OK and RESOURCE_EXHAUSTED)", res.Load.Codes[code], code))
		}
	}
	if res.Load.NoRetryInfo > 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("%d RESOURCE_EXHAUSTED answers lacked a RetryInfo", res.Load.NoRetryInfo))
	}
	if minShare := cmp.Or(cfg.MinOffered, 0.8); res.Offered < minShare*cfg.Factor*res.Capacity {
		res.Problems = append(res.Problems, fmt.Sprintf("the client offered only %.0f jobs/s, under %.0f%% of %g× the capacity of %.0f", res.Offered, minShare*100, cfg.Factor, res.Capacity))
	}
	// The buckets hold: at most the rate over the run plus one burst per
	// tenant (and a little for the refill during the last call).
	if limit := res.Capacity*(secs+1) + float64(cfg.Tenants)*max(1, cfg.SubmitRate); float64(res.Load.Count(codes.OK)) > limit {
		res.Problems = append(res.Problems, fmt.Sprintf("%d jobs admitted, more than the %.0f the tenants' rates allow", res.Load.Count(codes.OK), limit))
	}
	if res.RSSPeak > cfg.RSSBound {
		res.Problems = append(res.Problems, fmt.Sprintf("gateway RSS peaked at %d MiB, over the %d MiB bound", res.RSSPeak>>20, cfg.RSSBound>>20))
	}
	return res, nil
}
