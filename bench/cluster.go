package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
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
	Embedded = "embedded"
	SQS      = "sqs"
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
	// WorkerAddr is where drainers deliver.
	WorkerAddr string
	// Concurrency is the drainers' --concurrency. Defaults to 32.
	Concurrency int
	// Drain starts the drainers with the cluster; otherwise StartDrainers
	// does.
	Drain bool
	// Drainers is the number of drainer processes on SQS, each with
	// Concurrency slots. Defaults to 1; the embedded backend has one
	// (in the gateway).
	Drainers int
}

// Cluster is a running deployment: the gateway on a fixed loopback
// address (restarts keep it) and, on SQS, a separate drainer.
type Cluster struct {
	Addr        string // the gateway's ingest API
	DataDir     string // the embedded store's directory
	SQSEndpoint string // the local SQS server, on SQS
	Topology    topology.Topology

	env      *Env
	cfg      ClusterConfig
	dir      string
	args     []string // backend, tenants and queues flags, shared
	sqs      bool
	gw       *Proc
	drs      []*Proc // drainer processes, on SQS
	draining bool
}

// StartCluster writes the configs and starts the processes.
func (e *Env) StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Shards == 0 {
		cfg.Shards = 4
	}
	if cfg.Staleness == 0 {
		cfg.Staleness = topology.StalenessBoundDefault
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 32
	}
	cfg.Drainers = max(cfg.Drainers, 1)
	dir, err := e.Dir(cfg.Name)
	if err != nil {
		return nil, err
	}
	c := &Cluster{env: e, cfg: cfg, dir: dir, sqs: cfg.Backend == SQS}
	// A fresh queue prefix per run keeps runs on one SQS server apart.
	prefix := fmt.Sprintf("b%d", time.Now().UnixNano()%1e9)
	topo := Lane(prefix, cfg.Shards, cfg.FIFO, topology.Duration(cfg.Staleness))
	c.Topology, c.DataDir = topo, filepath.Join(dir, "data")
	tenantsFile, queuesFile := filepath.Join(dir, "tenants.yaml"), filepath.Join(dir, "queues.yaml")
	if err := WriteTenants(tenantsFile, cfg.Tenants); err != nil {
		return nil, err
	}
	if err := WriteTopology(queuesFile, topo); err != nil {
		return nil, err
	}
	c.args = []string{"--tenants", tenantsFile, "--queues", queuesFile, "--data-dir", c.DataDir, "--log-level", "info"}
	switch cfg.Backend {
	case Embedded:
		c.args = append(c.args, "--backend", "embedded")
	case SQS:
		endpoint, err := e.SQSEndpoint(ctx)
		if err != nil {
			return nil, err
		}
		c.SQSEndpoint = endpoint
		c.args = append(c.args, "--backend", "sqs", "--sqs-endpoint", endpoint, "--create-queues")
	default:
		return nil, fmt.Errorf("backend %q: want %s or %s", cfg.Backend, Embedded, SQS)
	}
	// The gateway restarts on its address (see StartDrainers): a port
	// from FreePort, which the kernel will not hand to an outgoing
	// connection meanwhile.
	listen, err := testcluster.FreePort()
	if err != nil {
		return nil, err
	}
	if err := c.startGateway(ctx, listen, cfg.Drain && !c.sqs); err != nil {
		c.Close()
		return nil, err
	}
	if cfg.Drain && c.sqs {
		if err := c.StartDrainers(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) drainArgs() []string {
	return []string{
		"--worker-addr", c.cfg.WorkerAddr, "--concurrency", strconv.Itoa(c.cfg.Concurrency),
		"--sideline=" + strconv.FormatBool(!c.cfg.FIFO),
		"--admin-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--shutdown-grace", "10s",
	}
}

func (c *Cluster) startGateway(ctx context.Context, listen string, drain bool) error {
	args := append([]string{"--listen", listen, "--drain=" + strconv.FormatBool(drain)}, c.args...)
	args = append(args, c.drainArgs()...)
	gw, err := c.env.Start(c.dir, "gateway", "gateway", args...)
	if err != nil {
		return err
	}
	c.gw = gw
	addr, err := gw.Addr(ctx, "gateway listening")
	if err != nil {
		return err
	}
	c.Addr = addr
	if drain {
		if _, err := gw.WaitLog(ctx, "admin API listening", time.Minute); err != nil {
			return err
		}
	}
	c.draining = drain
	return nil
}

// Gateway returns the gateway process.
func (c *Cluster) Gateway() *Proc { return c.gw }

// Procs returns the processes running now.
func (c *Cluster) Procs() []*Proc {
	return append([]*Proc{c.gw}, c.drs...)
}

// StartDrainers starts delivering: on SQS the drainer processes; on the
// embedded backend, whose store one process holds, a gateway restart with
// in-process drainers (submits wait for it on the same address).
func (c *Cluster) StartDrainers(ctx context.Context) error {
	if c.draining {
		return nil
	}
	if !c.sqs {
		if err := c.gw.Stop(30 * time.Second); err != nil {
			return err
		}
		return c.startGateway(ctx, c.Addr, true)
	}
	args := append([]string{"run"}, c.args...)
	args = append(args, c.drainArgs()...)
	for range c.cfg.Drainers {
		dr, err := c.env.Start(c.dir, "drainer", "drainer", args...)
		if err != nil {
			return err
		}
		c.drs = append(c.drs, dr)
	}
	for _, dr := range c.drs {
		if _, err := dr.WaitLog(ctx, "admin API listening", time.Minute); err != nil {
			return err
		}
	}
	c.draining = true
	return nil
}

// StopDrainers stops delivering (see StartDrainers).
func (c *Cluster) StopDrainers(ctx context.Context) error {
	if !c.draining {
		return nil
	}
	if !c.sqs {
		if err := c.gw.Stop(30 * time.Second); err != nil {
			return err
		}
		return c.startGateway(ctx, c.Addr, false)
	}
	err := c.stopDrainers()
	c.draining = false
	return err
}

// Close stops every process of the cluster.
func (c *Cluster) Close() error {
	errs := []error{c.stopDrainers()}
	if c.gw != nil {
		errs = append(errs, c.gw.Stop(30*time.Second))
	}
	return errors.Join(errs...)
}

func (c *Cluster) stopDrainers() error {
	var errs []error
	for _, dr := range c.drs {
		errs = append(errs, dr.Stop(30*time.Second))
	}
	c.drs = nil
	return errors.Join(errs...)
}

// DrainActions returns what the running drainers did so far, summed over
// the cluster's processes: sluice_drain_actions_total by action
// (delivered, spilled, backlogged, …), as a short text.
func (c *Cluster) DrainActions(ctx context.Context) string {
	total := map[string]float64{}
	for _, p := range c.Procs() {
		addr, err := p.Addr(ctx, "metrics listening")
		if err != nil {
			return "unknown: " + err.Error()
		}
		s, err := Scrape(ctx, addr)
		if err != nil {
			return "unknown: " + err.Error()
		}
		for action, v := range ByLabel(s, metrics.NameDrainActions, "action") {
			total[action] += v
		}
	}
	if len(total) == 0 {
		return "none"
	}
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(total)) {
		parts = append(parts, fmt.Sprintf("%s %s", a, Num(total[a])))
	}
	return strings.Join(parts, ", ")
}
