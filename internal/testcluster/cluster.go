package testcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
	"github.com/sluice-dev/sluice/topology"
)

// Backends a cluster runs on.
const (
	Embedded = "embedded"
	SQS      = "sqs"
)

// Env is one harness run: the built binaries, a scratch directory and,
// started on first use, the local SQS-compatible server.
type Env struct {
	// Bin is the directory of the built gateway and drainer (see Build).
	Bin string
	// Work is the scratch directory: each cluster's config files, data
	// directories and process logs.
	Work string
	// SQSLog receives the SQS-compatible server's output; nil discards it.
	SQSLog io.Writer

	mu  sync.Mutex
	seq int
	sqs *fauxqs.Server
}

// NewEnv builds cmd/gateway, cmd/drainer and cmd/sluicectl (pull worker
// processes) into work/bin, without the
// race detector: the harnesses run them under load for minutes, and the
// e2e tests already run them with it.
func NewEnv(ctx context.Context, work string) (*Env, error) {
	e := &Env{Bin: filepath.Join(work, "bin"), Work: work}
	if err := Build(ctx, e.Bin, false, "gateway", "drainer", "sluicectl"); err != nil {
		return nil, err
	}
	return e, nil
}

// Dir makes a new directory under Work, numbered in order of creation.
func (e *Env) Dir(name string) (string, error) {
	e.mu.Lock()
	e.seq++
	d := filepath.Join(e.Work, fmt.Sprintf("%02d-%s", e.seq, name))
	e.mu.Unlock()
	if err := os.MkdirAll(d, 0o750); err != nil {
		return "", fmt.Errorf("scratch directory: %w", err)
	}
	return d, nil
}

// SQSEndpoint starts the local SQS-compatible server on first use
// (installing it with test/fauxqs/ensure.sh if needed) and returns its
// endpoint.
func (e *Env) SQSEndpoint(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sqs == nil {
		s, err := fauxqs.Start(ctx, e.SQSLog)
		if err != nil {
			return "", fmt.Errorf("local SQS server: %w", err)
		}
		e.sqs = s
	}
	return e.sqs.Endpoint, nil
}

// StopSQS stops the local SQS server if it runs, so the next SQSEndpoint
// starts a fresh one: queues of finished runs would otherwise slow it.
func (e *Env) StopSQS() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sqs != nil {
		_ = e.sqs.Stop()
		e.sqs = nil
	}
}

// ClusterConfig describes a cluster: a gateway and, on SQS, drainer
// processes.
type ClusterConfig struct {
	// Name names the cluster's directory under the Env's Work.
	Name string
	// Backend is Embedded or SQS.
	Backend string
	// SQSEndpoint is the endpoint the processes use on SQS. Defaults to
	// the Env's server; a fault proxy in front of it, say.
	SQSEndpoint string
	// Queues and Tenants are the contents of the --queues and --tenants
	// files.
	Queues, Tenants string
	// DataDir is the gateway's data directory. Defaults to gateway/ in the
	// cluster's directory; each drainer has one of its own there.
	DataDir string
	// Drainers is the number of drainer processes (SQS only: the embedded
	// store allows one process); with none the gateway drains in-process.
	Drainers int
	// WorkerAddr is where the drainers deliver (push).
	WorkerAddr string
	// Pull serves pull workers instead: each draining process listens for
	// them (WorkerAddrs) and accepts WorkerKey.
	Pull bool
	// PullWorkers, with Pull, runs that many pull worker processes
	// (`sluicectl worker --forward PullForward`, roles "pullworker-N") per
	// draining process, each granting PullCredits (default 8): they pass
	// each job on to the push worker at PullForward and answer as it does,
	// so the harness's recording worker sees every delivery.
	PullWorkers int
	PullForward string
	PullCredits int
	// Concurrency is each drainer's --concurrency. Defaults to 32.
	Concurrency int
	// Idle starts the cluster with nothing draining (see SetDraining).
	Idle bool
	// Args are added to every process's flags, GatewayArgs to the
	// gateway's.
	Args, GatewayArgs []string
}

// Cluster is a set of sluice processes in roles: the gateway, and the
// drainer processes ("drainer" if one, "drainer-0", "drainer-1", … if
// several). A role keeps its addresses when it restarts, so clients
// reconnect, and appends its log to <role>.log in the cluster's
// directory. A cluster is driven from one goroutine.
type Cluster struct {
	Addr      string // the gateway's ingest API
	AdminAddr string // the admin API of the first draining process
	AdminKey  string // of every process's admin API
	WorkerKey string // pull workers' key, with ClusterConfig.Pull
	Dir       string // config files, data directories and logs
	DataDir   string // the gateway's
	Topology  topology.Topology

	env      *Env
	cfg      ClusterConfig
	roles    []*role
	draining bool
}

// role is one process of a cluster: its command and the process running
// it now.
type role struct {
	ready  string // the log line that says it serves, if not the admin API's
	name   string
	admin  string // its admin API's address
	worker string // its pull workers' address, with ClusterConfig.Pull
	spec   Spec
	p      *Proc
	kills  int
}

// NewCluster writes a cluster's config files and picks its addresses;
// Start starts it.
func (e *Env) NewCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Backend != Embedded && cfg.Backend != SQS || cfg.Backend == Embedded && cfg.Drainers > 0 {
		return nil, fmt.Errorf("cluster of backend %q with %d drainer processes: want %s, or %s with any", cfg.Backend, cfg.Drainers, Embedded, SQS)
	}
	dir, err := e.Dir(cfg.Name)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, DataDir: cmp.Or(cfg.DataDir, filepath.Join(dir, "gateway")), AdminKey: "sk_admin_testcluster", env: e, cfg: cfg, draining: !cfg.Idle}
	queues, tenants := filepath.Join(dir, "queues.yaml"), filepath.Join(dir, "tenants.yaml")
	tenantsYAML := cfg.Tenants
	target := []string{"--worker-addr", cfg.WorkerAddr}
	if cfg.Pull {
		c.WorkerKey = "sk_worker_testcluster"
		tenantsYAML += "\nworkers:\n  - name: testcluster\n    api_keys: [" + c.WorkerKey + "]\n"
		target = nil
	}
	if err := errors.Join(os.WriteFile(queues, []byte(cfg.Queues), 0o600), os.WriteFile(tenants, []byte(tenantsYAML), 0o600)); err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	if c.Topology, err = topology.Load(queues); err != nil {
		return nil, err
	}
	if c.Addr, err = FreePort(); err != nil {
		return nil, err
	}
	common := append([]string{
		"--queues", queues, "--tenants", tenants, "--concurrency", strconv.Itoa(cmp.Or(cfg.Concurrency, 32)),
		"--admin-key", c.AdminKey, "--metrics-listen", "127.0.0.1:0", "--shutdown-grace", "10s", "--log-level", "info",
	}, target...)
	var env []string
	if cfg.Backend == SQS {
		endpoint := cfg.SQSEndpoint
		if endpoint == "" {
			if endpoint, err = e.SQSEndpoint(ctx); err != nil {
				return nil, err
			}
		}
		common = append(common, "--backend", "sqs", "--sqs-endpoint", endpoint, "--aws-region", fauxqs.Region, "--create-queues")
		env = SQSEnv
	}
	common = append(common, cfg.Args...)
	if err := c.add("gateway", "gateway", env, slices.Concat([]string{"--listen", c.Addr, "--data-dir", c.DataDir}, common, cfg.GatewayArgs)); err != nil {
		return nil, err
	}
	for i := range cfg.Drainers {
		name := "drainer"
		if cfg.Drainers > 1 {
			name = fmt.Sprintf("drainer-%d", i)
		}
		if err := c.add(name, "drainer", env, append([]string{"run", "--data-dir", filepath.Join(dir, name)}, common...)); err != nil {
			return nil, err
		}
	}
	// The gateway's admin API serves only while it drains.
	c.AdminAddr = c.roles[min(1, len(c.roles)-1)].admin
	if cfg.Pull {
		for _, addr := range c.WorkerAddrs() {
			for range cfg.PullWorkers {
				name := fmt.Sprintf("pullworker-%d", len(c.roles)-1-cfg.Drainers)
				args := []string{
					"worker", "--addr", addr, "--key", c.WorkerKey, "--forward", cfg.PullForward,
					"--concurrency", strconv.Itoa(cmp.Or(cfg.PullCredits, 8)),
				}
				c.roles = append(c.roles, &role{name: name, ready: "pull worker connected", spec: Spec{
					Name: name, Path: filepath.Join(c.env.Bin, "sluicectl"), Args: args, LogPath: filepath.Join(c.Dir, name+".log"),
				}})
			}
		}
	}
	return c, nil
}

// add declares a role running bin with args and an admin API of its own.
func (c *Cluster) add(name, bin string, env, args []string) error {
	admin, err := FreePort()
	if err != nil {
		return err
	}
	args = append(args, "--admin-listen", admin)
	// Every process gets a pull-worker port of its own (used without a
	// push target), so that clusters can run side by side.
	worker, err := FreePort()
	if err != nil {
		return err
	}
	args = append(args, "--worker-listen", worker)
	c.roles = append(c.roles, &role{name: name, admin: admin, worker: worker, spec: Spec{Name: name, Path: filepath.Join(c.env.Bin, bin), Args: args, Env: env, LogPath: filepath.Join(c.Dir, name+".log")}})
	return nil
}

func (c *Cluster) role(name string) *role {
	for _, r := range c.roles {
		if r.name == name {
			return r
		}
	}
	panic("testcluster: no role " + name)
}

// WorkerAddrs returns the pull-worker addresses of the processes that
// drain (with ClusterConfig.Pull).
func (c *Cluster) WorkerAddrs() []string {
	var out []string
	for _, r := range c.roles {
		if r.worker != "" && (r.name != "gateway" || c.cfg.Drainers == 0) {
			out = append(out, r.worker)
		}
	}
	return out
}

// Roles returns the roles' names in start order: the gateway first.
func (c *Cluster) Roles() []string {
	names := make([]string, len(c.roles))
	for i, r := range c.roles {
		names[i] = r.name
	}
	return names
}

// Start starts the gateway and, unless the cluster is idle, the drainer
// processes.
func (c *Cluster) Start(ctx context.Context) error {
	for _, name := range c.Roles() {
		if name != "gateway" && !c.draining {
			break
		}
		if err := c.StartRole(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// Launch starts a role's process without waiting for it to serve.
func (c *Cluster) Launch(name string) (*Proc, error) {
	r := c.role(name)
	spec := r.spec
	if name == "gateway" {
		spec.Args = append(slices.Clone(spec.Args), "--drain="+strconv.FormatBool(c.gatewayDrains()))
	}
	p, err := Start(spec)
	if err != nil {
		return nil, err
	}
	r.p = p
	return p, nil
}

// StartRole starts a role and waits up to 2 minutes until it serves: the
// gateway's ingest API and, where the process drains, its admin API.
func (c *Cluster) StartRole(ctx context.Context, name string) error {
	ready := []string{"admin API listening"}
	if r := c.role(name).ready; r != "" {
		ready = []string{r}
	}
	if name == "gateway" {
		ready = []string{"gateway listening"}
		if c.gatewayDrains() {
			ready = append(ready, "admin API listening")
		}
	}
	p, err := c.Launch(name)
	if err != nil {
		return err
	}
	for _, msg := range ready {
		if _, err := p.WaitLog(ctx, msg, 2*time.Minute); err != nil {
			p.Kill()
			return err
		}
	}
	return nil
}

// gatewayDrains reports whether the gateway runs the drainers.
func (c *Cluster) gatewayDrains() bool { return c.draining && c.cfg.Drainers == 0 }

// SetDraining starts or stops delivery: the drainer processes or, with
// none, the gateway's in-process drainers, by starting the gateway again
// on its address with --drain set (submits wait for it meanwhile).
func (c *Cluster) SetDraining(ctx context.Context, on bool) error {
	if c.draining == on {
		return nil
	}
	c.draining = on
	if c.cfg.Drainers == 0 {
		if p := c.Proc("gateway"); p != nil && !p.Exited() {
			if err := p.Stop(30 * time.Second); err != nil {
				return err
			}
		}
		return c.StartRole(ctx, "gateway")
	}
	var errs []error
	for _, name := range c.Roles()[1:] {
		if on {
			errs = append(errs, c.StartRole(ctx, name))
		} else if p := c.Proc(name); p != nil {
			errs = append(errs, p.Stop(30*time.Second))
		}
	}
	return errors.Join(errs...)
}

// Proc returns the process running a role now, or last; nil before its
// first start.
func (c *Cluster) Proc(name string) *Proc { return c.role(name).p }

// Procs returns the processes running now, in role order.
func (c *Cluster) Procs() []*Proc {
	var ps []*Proc
	for _, r := range c.roles {
		if r.p != nil && !r.p.Exited() {
			ps = append(ps, r.p)
		}
	}
	return ps
}

// Kill sends SIGKILL to a role's process and waits for its exit.
func (c *Cluster) Kill(name string) {
	r := c.role(name)
	r.kills++
	r.p.Kill()
}

// Kills returns the SIGKILLs per role.
func (c *Cluster) Kills() map[string]int {
	out := map[string]int{}
	for _, r := range c.roles {
		out[r.name] = r.kills
	}
	return out
}

// Close sends SIGTERM to every running role, drainers first, and reports
// those that did not exit cleanly within 30 s (they are killed). A
// process that had exited before is left to its caller to report.
func (c *Cluster) Close() error {
	var errs []string
	for _, r := range slices.Backward(c.roles) {
		if r.p != nil && !r.p.Exited() {
			if err := r.p.Stop(30 * time.Second); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", r.name, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stop: %s", strings.Join(errs, "; "))
	}
	return nil
}

// OpenBackend opens the cluster's queues for the harness's own use: on
// the embedded backend the gateway's store (which allows one process:
// the gateway must have stopped), on SQS the Env's server itself, never
// a fault proxy in front of it.
func (c *Cluster) OpenBackend(ctx context.Context) (queue.Backend, error) {
	quiet := slog.New(slog.DiscardHandler)
	if c.cfg.Backend == Embedded {
		b, err := embeddedqueue.Open(filepath.Join(c.DataDir, "queues.db"), embeddedqueue.Options{Logger: quiet})
		if err != nil {
			return nil, fmt.Errorf("open the embedded store: %w", err)
		}
		return b, nil
	}
	endpoint, err := c.env.SQSEndpoint(ctx)
	if err != nil {
		return nil, err
	}
	b, err := sqsqueue.New(ctx, sqsqueue.Config{
		Endpoint: endpoint, Region: fauxqs.Region, QueueURLs: c.Topology.QueueURLs, Logger: quiet,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
	if err != nil {
		return nil, fmt.Errorf("open the SQS backend: %w", err)
	}
	return b, nil
}
