package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// CrashConfig sizes a crash-accounting run.
type CrashConfig struct {
	// Backend is "embedded" (one gateway draining in-process, killed
	// again and again) or "sqs" (a gateway and two drainer processes on
	// the SQS-compatible server, one of them killed each time).
	Backend string
	// Fsync is the embedded backend's --fsync (empty: the default,
	// always), say "interval:10ms": then an OK means the job is written
	// to the OS, which a SIGKILL must not lose either.
	Fsync string
	// Kills is the number of SIGKILLs.
	Kills int
	// MinUp and MaxUp bound how long a process runs between kills
	// (uniformly random). A share of kills (StartupKills) instead hits a
	// process while it is still starting, before it serves.
	MinUp, MaxUp time.Duration
	StartupKills float64
	// TermShare is the share of stops that are SIGTERM (graceful: the
	// process must exit cleanly within its grace) instead of SIGKILL.
	TermShare float64
	// Rate is the jobs per second offered; Callers the goroutines.
	Rate    float64
	Callers int
	// Concurrency is each drainer's delivery concurrency; with Pull, each
	// pull worker's credits.
	Concurrency int
	// Pull delivers to pull worker processes (two per draining process,
	// `sluicectl worker --forward` to the recording worker), which are
	// killed and restarted like the others.
	Pull bool
	// DrainTimeout bounds the wait for the last deliveries.
	DrainTimeout time.Duration
}

// CrashResult is the outcome of a crash run.
type CrashResult struct {
	Backend  string         `json:"backend"`
	Kills    map[string]int `json:"kills"`
	Crashes  int            `json:"crashes"`
	Startups int            `json:"startup_kills"` // kills during start-up (recovery)
	// Terms counts graceful stops (SIGTERM) between the kills.
	Terms   int           `json:"terms"`
	Elapsed time.Duration `json:"elapsed"`
	Drain   time.Duration `json:"drain"` // wait for the last deliveries after the load
	Load    LoadStats     `json:"load"`
	Accounting
	Left Leftovers `json:"left"`
	// DuplicateBound is the most duplicates the kills can explain: each
	// kill of a draining process can redeliver the jobs it had delivered
	// but not yet deleted (its delivery slots) and repeat the moves it had
	// under way (retries, sidelining: send-then-delete).
	DuplicateBound int `json:"duplicate_bound"`
	// Problems lists contract violations and harness failures.
	Problems []string `json:"problems"`
}

// movesInFlight is the drainer's least number of concurrent moves
// (drainer.movesMin).
const movesInFlight = 64

const crashQueuesYAML = `prefix: %s
max_receive_count: 10
lanes:
  - {name: premium, shards: 4, weight: 6, visibility_timeout: 3s, staleness_bound: 5s, high_water_mark: 1000000}
  - {name: standard, shards: 4, weight: 3, visibility_timeout: 3s, staleness_bound: 5s, high_water_mark: 1000000}
  - {name: free, shards: 2, weight: 1, visibility_timeout: 3s, staleness_bound: 5s, high_water_mark: 1000000}
`

const crashTenantsYAML = `tenants:
  - {id: acme, tier: premium, api_keys: [rel-acme-key], submit_rate: 100000, submit_burst: 100000, drain_rate: 5000, drain_burst: 5000, max_in_flight: 64}
  - {id: bolt, tier: standard, api_keys: [rel-bolt-key], submit_rate: 100000, submit_burst: 100000, drain_rate: 5000, drain_burst: 5000, max_in_flight: 64}
  - {id: cask, tier: standard, api_keys: [rel-cask-key], submit_rate: 100000, submit_burst: 100000, drain_rate: 60, drain_burst: 60, max_in_flight: 8}
  - {id: dune, tier: free, api_keys: [rel-dune-key], submit_rate: 100000, submit_burst: 100000, drain_rate: 5000, drain_burst: 5000, max_in_flight: 64}
`

var crashKeys = []string{"rel-acme-key", "rel-bolt-key", "rel-cask-key", "rel-dune-key"}

// crashMix exercises every path to the end of a job: plain delivery, a
// retry, an immediate dead letter and one after the attempts run out.
var crashMix = Mix{Flaky: 0.05, Poison: 0.02, Doomed: 0.01}

// crashLoad is the load of the crash and fault runs: all four tenants
// (the drain-limited one too), a share of batches, and the crash mix.
func crashLoad(addr string, callers int, rate float64) LoadConfig {
	return LoadConfig{
		Addr: addr, Keys: crashKeys, Callers: callers, Rate: rate,
		BatchShare: 0.3, Mix: crashMix, PayloadSize: 200, CallTimeout: 30 * time.Second,
	}
}

// drainFlags make retries quick so doomed jobs reach their DLQ within the
// run.
var drainFlags = []string{"--max-attempts", "3", "--retry-base", "100ms", "--retry-cap", "500ms"}

// queuePrefix returns a queue-name prefix unique to this process and
// scenario, so runs sharing an SQS-compatible server never mix.
func queuePrefix(scenario string) string {
	return fmt.Sprintf("rel%d%s%d", os.Getpid(), scenario, rand.N(1000))
}

// RunCrash runs gateway and drainers under load, kills them with SIGKILL
// at random moments and restarts them, then lets them drain and checks
// every acknowledged job against the deliveries and the DLQs.
func RunCrash(ctx context.Context, env *Env, cfg CrashConfig) (*CrashResult, error) {
	res := &CrashResult{Backend: cfg.Backend}
	if cfg.Fsync != "" {
		if cfg.Backend != "embedded" {
			return nil, fmt.Errorf("crash run: --fsync %s is for the embedded backend, not %s", cfg.Fsync, cfg.Backend)
		}
		res.Backend += ", --fsync=" + cfg.Fsync
	}
	if cfg.Pull {
		res.Backend += ", pull workers"
	}
	cc := testcluster.ClusterConfig{
		Name: "crash-" + cfg.Backend, Backend: cfg.Backend,
		Queues: fmt.Sprintf(crashQueuesYAML, queuePrefix("c")), Tenants: crashTenantsYAML,
		Concurrency: cfg.Concurrency, Args: drainFlags,
		Pull: cfg.Pull, PullWorkers: 2, PullCredits: cfg.Concurrency,
	}
	if cfg.Fsync != "" {
		cc.Args = append(slices.Clone(drainFlags), "--fsync", cfg.Fsync)
	}
	if cfg.Backend == testcluster.SQS {
		cc.Drainers = 2
	}
	c, err := newCluster(ctx, env, 20*time.Millisecond, cc)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := c.Start(ctx); err != nil {
		return nil, err
	}

	ledger := &Ledger{}
	lc := crashLoad(c.Addr, cfg.Callers, cfg.Rate)
	lc.WaitForReady = true
	load, err := NewLoad(lc, ledger)
	if err != nil {
		return nil, err
	}
	defer load.Close()
	start := time.Now()
	stopLoad := load.Start(ctx)

	killErr := c.killLoop(ctx, cfg, res)
	stopLoad()
	res.Load = load.Stats()
	res.Kills = c.Kills()
	if killErr != nil {
		return res, killErr
	}
	env.logf("crash %s: %d kills, %d jobs submitted; draining", cfg.Backend, res.Crashes, res.Load.Jobs)

	res.Drain = c.drainAndStop(ctx, ledger, cfg.DrainTimeout, &res.Problems)
	res.Elapsed = time.Since(start)
	if err := c.account(ctx, ledger, &res.Accounting, &res.Left, &res.Problems); err != nil {
		return res, err
	}
	drainKills := 0
	for name, n := range res.Kills {
		if cfg.Backend == "embedded" || strings.HasPrefix(name, "drainer") {
			drainKills += n
		}
	}
	res.DuplicateBound = drainKills * (max(1, cfg.Concurrency) + movesInFlight)
	if res.Duplicates > res.DuplicateBound {
		res.Problems = append(res.Problems, fmt.Sprintf("%d duplicates, more than the %d that %d kills of draining processes explain", res.Duplicates, res.DuplicateBound, drainKills))
	}
	return res, nil
}

// killLoop kills a random role at random moments and restarts it, until
// cfg.Kills kills are done.
func (c *cluster) killLoop(ctx context.Context, cfg CrashConfig, res *CrashResult) error {
	names := c.Roles()
	for res.Crashes < cfg.Kills {
		name := names[rand.N(len(names))]
		up := cfg.MinUp + time.Duration(rand.N(int64(cfg.MaxUp-cfg.MinUp)+1))
		if !sleepCtx(ctx, up) {
			return ctx.Err()
		}
		if rand.Float64() < cfg.TermShare {
			if err := c.Proc(name).Stop(30 * time.Second); err != nil {
				res.Problems = append(res.Problems, fmt.Sprintf("%s after SIGTERM: %v", name, err))
			}
			res.Terms++
			if err := c.StartRole(ctx, name); err != nil {
				return fmt.Errorf("restart %s after SIGTERM: %w", name, err)
			}
			continue
		}
		c.Kill(name)
		res.Crashes++
		if rand.Float64() < cfg.StartupKills {
			// Kill it again during start-up, before it serves: while it
			// opens and recovers its store, or connects to SQS.
			if _, err := c.Launch(name); err != nil {
				return err
			}
			sleepCtx(ctx, time.Duration(rand.N(int64(200*time.Millisecond))))
			c.Kill(name)
			res.Crashes++
			res.Startups++
		}
		if err := c.StartRole(ctx, name); err != nil {
			return fmt.Errorf("restart %s after kill %d: %w", name, res.Crashes, err)
		}
	}
	return nil
}

// account reads the final queues of a stopped cluster (the DLQs and what
// is left in the others) and checks the ledger against them and the
// worker's deliveries, adding the contract's violations to problems.
func (c *cluster) account(ctx context.Context, ledger *Ledger, a *Accounting, left *Leftovers, problems *[]string) error {
	b, err := c.OpenBackend(ctx)
	if err != nil {
		return err
	}
	dead, final, err := ReadFinal(ctx, b, c.Topology)
	_ = b.Close()
	if err != nil {
		return err
	}
	*left = final
	delivered, payloads := c.worker.Acked()
	*a = ledger.Check(delivered, payloads, dead, left.Jobs)
	a.LostLog = c.logLinesAbout(a.LostIDs, 3, 40)
	*problems = append(*problems, a.Violations()...)
	if left.DLQInFlight > 0 {
		*problems = append(*problems, fmt.Sprintf("%d dead letters were hidden by a receive when the DLQs were read", left.DLQInFlight))
	}
	return nil
}

// logLinesAbout returns up to perJob lines of each role's log that name
// one of the first jobs of ids ("<job id> (<kind>)"), prefixed with the
// role, so that a loss report shows what the processes did with the job.
func (c *cluster) logLinesAbout(ids []string, jobs, perJob int) []string {
	var out []string
	for _, id := range ids[:min(jobs, len(ids))] {
		id, _, _ = strings.Cut(id, " ")
		n := 0
		for _, role := range c.Roles() {
			data, err := os.ReadFile(filepath.Join(c.Dir, role+".log"))
			if err != nil {
				continue
			}
			for line := range strings.SplitSeq(string(data), "\n") {
				if n < perJob && strings.Contains(line, id) {
					out = append(out, role+": "+line)
					n++
				}
			}
		}
	}
	return out
}

// sleepCtx waits for d or until ctx ends (see periodic.Sleep).
var sleepCtx = periodic.Sleep
