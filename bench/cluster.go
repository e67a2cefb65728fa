package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/topology"
)

// Backends the scenarios run on.
const (
	Embedded = testcluster.Embedded
	SQS      = testcluster.SQS
)

// ClusterConfig describes a sluice deployment for one scenario run.
type ClusterConfig struct {
	// Name labels the run's directory and logs.
	Name string
	// Backend is Embedded (one gateway process with in-process drainers)
	// or SQS (a gateway without drainers and a cmd/drainer process, both
	// on the local SQS server).
	Backend string
	// FIFO runs the plain shared FIFO baseline: --sideline=false and one
	// shard per lane chosen by every tenant.
	FIFO bool
	// Shards per lane in sluice mode. Defaults to 4.
	Shards int
	// Staleness is the lane's staleness bound. Defaults to the
	// topology's default (5m): only the scenarios about sidelining set a
	// short one, so that it acts within a short run.
	Staleness time.Duration
	// Tenants to configure.
	Tenants []Tenant
	// WorkerAddr is where drainers deliver (push).
	WorkerAddr string
	// Pull serves pull workers instead (Cluster.WorkerAddrs and
	// WorkerKey; Worker.Pull connects them).
	Pull bool
	// Args are added to every process's flags.
	Args []string
	// Concurrency is the drainers' --concurrency. Defaults to 32.
	Concurrency int
	// Drain starts the drainers with the cluster; otherwise
	// SetDraining does (on the embedded backend, whose store one process
	// holds, by restarting the gateway on its address).
	Drain bool
	// Drainers is the number of drainer processes on SQS, each with
	// Concurrency slots. Defaults to 1; the embedded backend has one
	// (in the gateway).
	Drainers int
}

// Cluster is a running deployment (the gateway on a fixed loopback
// address, which restarts keep, and on SQS drainer processes) and a
// client connected to its ingest API.
type Cluster struct {
	*testcluster.Cluster
	*Client
}

// Close closes the client and stops the processes.
func (c *Cluster) Close() error {
	_ = c.Client.Close()
	return c.Cluster.Close()
}

// StartCluster writes the configs and starts the processes.
func (e *Env) StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	// A fresh queue prefix per run keeps runs on one SQS server apart.
	prefix := fmt.Sprintf("b%d", time.Now().UnixNano()%1e9)
	queues, err := TopologyFile(Lane(prefix, cmp.Or(cfg.Shards, 4), cfg.FIFO, topology.Duration(cmp.Or(cfg.Staleness, topology.StalenessBoundDefault))))
	if err != nil {
		return nil, err
	}
	drainers := 0
	if cfg.Backend == SQS {
		drainers = max(cfg.Drainers, 1)
	}
	tc, err := e.NewCluster(ctx, testcluster.ClusterConfig{
		Name: cfg.Name, Backend: cfg.Backend, Queues: queues, Tenants: TenantsFile(cfg.Tenants),
		Drainers: drainers, WorkerAddr: cfg.WorkerAddr, Pull: cfg.Pull, Concurrency: cfg.Concurrency, Idle: !cfg.Drain,
		Args: append([]string{"--sideline=" + strconv.FormatBool(!cfg.FIFO)}, cfg.Args...),
	})
	if err != nil {
		return nil, err
	}
	if err := tc.Start(ctx); err != nil {
		_ = tc.Close()
		return nil, err
	}
	c, err := Dial(tc.Addr)
	if err != nil {
		_ = tc.Close()
		return nil, err
	}
	return &Cluster{Cluster: tc, Client: c}, nil
}

// DrainActions returns what the running drainers did so far, summed over
// the cluster's processes: sluice_drain_actions_total by action
// (delivered, spilled, backlogged, …), as a short text.
func DrainActions(ctx context.Context, c *Cluster) string {
	total, writes, err := drainTotals(ctx, c)
	if err != nil {
		return "unknown: " + err.Error()
	}
	if len(total) == 0 {
		return "none"
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(total)) {
		parts = append(parts, fmt.Sprintf("%s %s", a, Num(total[a])))
	}
	text := strings.Join(parts, ", ")
	if w := storeWrites(writes); w != "" {
		text += "; " + w
	}
	return text
}

// WaitAcked waits, up to timeout, until the cluster's drainers count n
// deliveries acknowledged (the delivered action): a drainer counts a
// delivery once its ack (the delete) is done, which can come after the
// worker has seen the job. It reports whether they did.
func WaitAcked(ctx context.Context, c *Cluster, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		total, _, err := drainTotals(ctx, c)
		if err == nil && total[metrics.ActionDelivered] >= float64(n) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// drainTotals scrapes the cluster's processes: sluice_drain_actions_total
// summed by action, and every sample.
func drainTotals(ctx context.Context, c *Cluster) (map[string]float64, []Sample, error) {
	total := map[string]float64{}
	var all []Sample
	for _, p := range c.Procs() {
		addr, err := p.Addr(ctx, "metrics listening")
		if err != nil {
			return nil, nil, err
		}
		s, err := Scrape(ctx, addr)
		if err != nil {
			return nil, nil, err
		}
		for action, v := range ByLabel(s, metrics.NameDrainActions, "action") {
			total[action] += v
		}
		all = append(all, s...)
	}
	return total, all, nil
}

// storeWrites sums up the embedded store's writer from samples of one or
// more processes: its writes (group commits), operations per write, the
// bucket bound under which 99 % of the writes took, and how many took over
// 50 ms. "" when no process has an embedded store.
func storeWrites(samples []Sample) string {
	buckets := map[float64]float64{} // le → cumulative count
	var count, ops float64
	for _, s := range samples {
		switch s.Name {
		case metrics.NameStoreWrite + "_bucket":
			le, err := strconv.ParseFloat(s.Labels["le"], 64)
			if err == nil {
				buckets[le] += s.Value
			}
		case metrics.NameStoreWrite + "_count":
			count += s.Value
		case metrics.NameStoreWriteOps:
			ops += s.Value
		}
	}
	if count == 0 {
		return ""
	}
	bounds := slices.Sorted(maps.Keys(buckets))
	p99, over50 := math.Inf(1), 0.0
	for _, le := range bounds {
		if buckets[le] >= 0.99*count && math.IsInf(p99, 1) {
			p99 = le
		}
		if le == 0.05 {
			over50 = count - buckets[le]
		}
	}
	return fmt.Sprintf("store writes %s (%.1f operations each), p99 ≤ %s, %s over 50 ms",
		Num(count), ops/count, time.Duration(p99*float64(time.Second)), Num(over50))
}
