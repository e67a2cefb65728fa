// Package node assembles sluice's parts into the processes that the
// binaries run: it opens the queue backend, loads configuration, builds the
// delivery handler and runs drainers with their admin API. cmd/gateway and
// cmd/drainer are thin wrappers over it.
package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-dev/sluice/admin"
	"github.com/sluice-dev/sluice/drainer"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/dirsync"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/pull"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/scheduler"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

// LoadTopology reads the queue config file, or returns the default
// topology when path is empty, and logs each deprecated key the file uses.
func LoadTopology(path string, log *slog.Logger) (topology.Topology, error) {
	if path == "" {
		return topology.Default(), nil
	}
	t, err := topology.Load(path)
	if err != nil {
		return t, err
	}
	for _, d := range t.Deprecations {
		log.Warn("queue config "+path+": "+d, slog.String("file", path))
	}
	return t, nil
}

// BackendFlags selects and configures the queue backend.
type BackendFlags struct {
	Kind         string // embedded or sqs
	DataDir      string
	SQSEndpoint  string
	Region       string
	CreateQueues bool
	// ReceiveLinger is the drainers' pause after a receive that got less
	// than a full batch; negative means the backend's default (see
	// DrainReceiveLinger).
	ReceiveLinger time.Duration
	// SendLinger is how long a send to an SQS queue waits for others to
	// share its SendMessageBatch, as sqsqueue.Config.Linger: zero for its
	// default, negative for none.
	SendLinger time.Duration
	// SyncInterval is the embedded backend's --fsync: zero for always
	// (fsync before every OK), else interval:<SyncInterval>.
	SyncInterval time.Duration

	// dirChecked and dirMade record MakeDataDir's finding, for
	// OpenBackend's log.
	dirChecked, dirMade bool
}

// MakeDataDir creates --data-dir if it does not exist, remembering
// whether it did: OpenBackend warns of a new, empty store in a directory
// made by this start. A binary that writes to the data directory before
// it opens the backend (the gateway's keys) calls it first, with the
// BackendFlags it then gives OpenBackend; OpenBackend calls it when it
// was not.
func (f *BackendFlags) MakeDataDir() error {
	_, err := os.Stat(f.DataDir)
	f.dirChecked, f.dirMade = true, errors.Is(err, fs.ErrNotExist)
	if err := os.MkdirAll(f.DataDir, 0o750); err != nil {
		return fmt.Errorf("create data directory (--data-dir): %w", err)
	}
	return nil
}

// newStoreWarning is the warning logged when this start made the store,
// and maybe its directory: a missing data directory (or volume not
// mounted) was created without a word, and jobs submitted then were
// hidden under the mountpoint once the volume was mounted again (found by
// a tester).
const newStoreWarning = "if this host had jobs before, stop now: is the volume mounted, and is --data-dir right?"

// slowOpenBytes is the store file size from which opening it is worth a
// line before, as well as after.
const slowOpenBytes = 1 << 30

// fsyncFlag is --fsync: "always" or "interval:<duration>".
type fsyncFlag struct{ d *time.Duration }

func (f fsyncFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return "always"
	}
	return "interval:" + f.d.String()
}

func (f fsyncFlag) Set(s string) error {
	d, err := ParseFsync(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// ParseFsync reads an --fsync value: "always" is zero, "interval:<d>" is
// d, which must be a positive duration of at most a minute.
func ParseFsync(s string) (time.Duration, error) {
	if s == "always" {
		return 0, nil
	}
	v, ok := strings.CutPrefix(s, "interval:")
	if !ok {
		return 0, fmt.Errorf("want always or interval:<duration>, such as interval:10ms")
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("interval %q is not a duration such as 10ms", v)
	case d <= 0:
		return 0, fmt.Errorf("interval %s: want a positive duration, such as 10ms", v)
	case d > time.Minute:
		return 0, fmt.Errorf("interval %s: want at most 1m (a power loss can lose this much)", v)
	}
	return d, nil
}

// SQSReceiveLingerDefault is the drainers' receive linger on SQS: long
// enough that a busy queue's receives come back full (each is a billed
// call), short next to SQS's own latency.
const SQSReceiveLingerDefault = 50 * time.Millisecond

// DrainReceiveLinger is the receive linger the drainers use: the flag's
// value, or by default none on the embedded backend (receives cost
// nothing there) and SQSReceiveLingerDefault on SQS.
func (f BackendFlags) DrainReceiveLinger() time.Duration {
	switch {
	case f.ReceiveLinger >= 0:
		return f.ReceiveLinger
	case f.Kind == "sqs":
		return SQSReceiveLingerDefault
	}
	return 0
}

// autoDuration is a duration flag that also takes "auto" (the default,
// stored as auto) and "0" (none, stored as none): the two linger flags
// keep the conventions of the fields they feed, which differ
// (drainer.Config.ReceiveLinger: negative is auto; sqsqueue.Config.Linger:
// zero is auto and negative none).
type autoDuration struct {
	d          *time.Duration
	auto, none time.Duration
}

func (a autoDuration) String() string {
	switch {
	case a.d == nil || *a.d == a.auto:
		return "auto"
	case *a.d == a.none:
		return "0"
	}
	return a.d.String()
}

func (a autoDuration) Set(s string) error {
	if s == "auto" {
		*a.d = a.auto
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want auto or a duration such as 50ms")
	}
	if d == 0 {
		d = a.none
	}
	*a.d = d
	return nil
}

// Register adds the backend flags to fs.
func (f *BackendFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Kind, "backend", "embedded", "queue backend: embedded (durable files in --data-dir) or sqs")
	fs.StringVar(&f.DataDir, "data-dir", "data", "directory of the embedded backend, and of the development and admin keys")
	fs.StringVar(&f.SQSEndpoint, "sqs-endpoint", "", "SQS endpoint URL, e.g. http://127.0.0.1:4566 for a local SQS-compatible server; empty uses AWS")
	fs.StringVar(&f.Region, "aws-region", "", "AWS region for SQS, and for CloudWatch with --cloudwatch-namespace; empty uses AWS_REGION or the shared config")
	fs.BoolVar(&f.CreateQueues, "create-queues", false, "with --backend sqs, create missing queues (normally Terraform does)")
	f.ReceiveLinger = -1
	fs.Var(fsyncFlag{&f.SyncInterval}, "fsync", "embedded backend durability: always (OK after an fsync: survives power loss) or interval:<d> such as interval:10ms (OK once written to the OS: survives a crash of the process; a power loss can lose the last <d> of jobs)")
	fs.Var(autoDuration{d: &f.SendLinger, auto: 0, none: -1}, "sqs-send-linger", fmt.Sprintf("how long a send to an SQS queue waits for others to share its SendMessageBatch (each call is billed; a Submit waits this long at most for its batch; auto: %s, 0: none, at most %s)", sqsqueue.LingerDefault, MaxSendLinger))
	fs.Var(autoDuration{d: &f.ReceiveLinger, auto: -1, none: 0}, "receive-linger", "drainers' pause after a receive that got less than a full batch (auto: none on embedded, 50ms on sqs, where each receive is billed)")
}

// MaxSendLinger bounds --sqs-send-linger: every Submit on SQS may wait
// that long for its batch.
const MaxSendLinger = time.Second

// OpenBackend opens the selected backend. The embedded one is created if
// needed with every queue of topo; SQS queues are created only when asked.
func OpenBackend(ctx context.Context, f BackendFlags, topo topology.Topology, log *slog.Logger) (queue.Backend, error) {
	var b queue.Backend
	create := true
	switch f.Kind {
	case "embedded":
		// SQS settings without --backend sqs were ignored: the jobs went
		// to local disk while the operator looked at SQS (found in
		// review).
		var sqsFlags []string
		for _, s := range []struct {
			name string
			set  bool
		}{{"--sqs-endpoint", f.SQSEndpoint != ""}, {"--aws-region", f.Region != ""}, {"--create-queues", f.CreateQueues}, {"--sqs-send-linger", f.SendLinger != 0}} {
			if s.set {
				sqsFlags = append(sqsFlags, s.name)
			}
		}
		if len(sqsFlags) > 0 {
			return nil, fmt.Errorf("%s: these apply to --backend sqs only, and the backend is embedded (files in --data-dir); add --backend sqs, or leave them out", strings.Join(sqsFlags, ", "))
		}
		if !f.dirChecked {
			if err := f.MakeDataDir(); err != nil {
				return nil, err
			}
		}
		path := filepath.Join(f.DataDir, "queues.db")
		fi, statErr := os.Stat(path)
		newStore := errors.Is(statErr, fs.ErrNotExist)
		if statErr == nil && fi.Size() >= slowOpenBytes {
			// Opening walks the store's pages and indexes every job: about
			// 10 s for a store of 8-11 GB (5 million jobs), which was
			// silent (found in a scale test).
			log.InfoContext(ctx, "opening the embedded store; a large one takes a while", slog.String("path", path), slog.Int64("bytes", fi.Size()))
		}
		opening := time.Now()
		// The process is the store's only consumer (its file lock keeps
		// others out): what was in flight when it last stopped, a crash
		// included, goes back at once rather than after its visibility
		// timeout (30 s by default).
		eb, err := embeddedqueue.Open(path, embeddedqueue.Options{Logger: log, SyncInterval: f.SyncInterval, ReleaseHeld: true})
		if err != nil {
			return nil, err
		}
		took := time.Since(opening)
		switch {
		case f.dirMade:
			log.WarnContext(ctx, "created a new, empty data directory and store in it: "+newStoreWarning, slog.String("path", f.DataDir))
		case newStore:
			log.WarnContext(ctx, "created a new, empty store: "+newStoreWarning, slog.String("path", path))
		}
		// The durability in force was nowhere to be seen once the process
		// ran (found in a walkthrough).
		log.InfoContext(ctx, "embedded store open", slog.String("path", path), slog.Int("messages", eb.Messages()),
			slog.String("fsync", fsyncFlag{&f.SyncInterval}.String()), slog.Duration("took", took.Round(time.Millisecond)))
		b = eb
	case "sqs":
		if f.SyncInterval != 0 {
			return nil, errors.New("--fsync applies to the embedded backend only; SQS acknowledges a send once it has stored it")
		}
		if f.SendLinger > MaxSendLinger {
			return nil, fmt.Errorf("--sqs-send-linger %s: at most %s (a Submit waits up to this long for its batch to go out)", f.SendLinger, MaxSendLinger)
		}
		sb, err := sqsqueue.New(ctx, sqsqueue.Config{Endpoint: f.SQSEndpoint, Region: f.Region, QueueURLs: topo.QueueURLs, Linger: f.SendLinger, Logger: log})
		if errors.Is(err, sqsqueue.ErrNoRegion) {
			return nil, errors.New("--backend sqs: no AWS region: give --aws-region, or set AWS_REGION (or a region in the shared config's profile)")
		}
		if err != nil {
			return nil, fmt.Errorf("sqs backend: %w", err)
		}
		b, create = sb, f.CreateQueues
	default:
		return nil, fmt.Errorf("--backend %q: want embedded or sqs", f.Kind)
	}
	if create {
		if err := b.EnsureQueues(ctx, topo.Specs()); err != nil {
			return nil, errors.Join(fmt.Errorf("create queues: %w", err), b.Close())
		}
	} else if err := waitForQueues(ctx, b, topo.Names(), queueWait, log); err != nil {
		return nil, errors.Join(err, b.Close())
	}
	return b, nil
}

// queueWait is how long a process that does not create its SQS queues
// waits for them to exist.
var queueWait = time.Minute

// waitForQueues waits, for at most wait, until every named queue exists,
// saying which it waits for. A drainer started beside the gateway that
// creates the queues (--create-queues), or while the Terraform module is
// still being applied, found them missing and stopped at once.
func waitForQueues(ctx context.Context, b queue.Backend, names []string, wait time.Duration, log *slog.Logger) error {
	deadline := time.Now().Add(wait)
	var told time.Time
	for {
		var missing []string
		for _, name := range names {
			_, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{name}})
			switch {
			case errors.Is(err, queue.ErrQueueNotFound):
				missing = append(missing, name)
			case err != nil:
				return fmt.Errorf("check that the queues exist: %w", err)
			}
		}
		switch {
		case len(missing) == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("queues %s do not exist after %s: apply the Terraform module (and give --queues its queue config output, with the same prefix), "+
				"or run one process with --create-queues", strings.Join(missing, ", "), wait)
		case time.Since(told) >= 10*time.Second:
			told = time.Now()
			log.WarnContext(ctx, "waiting for the queues to exist (created by the Terraform module, or a process run with --create-queues)",
				slog.Any("missing", missing), slog.Duration("gives_up_in", time.Until(deadline).Round(time.Second)))
		}
		if !periodic.Sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// WithRetiredShards returns topo with the shard queues that its lanes no
// longer count but that still hold jobs (a lane's shards were lowered):
// the drainers read them until they are empty and the high-water mark
// counts their jobs; no new job goes to them. It looks only if the backend
// can list its queues, and logs each lane that has some, and the queues
// that hold jobs no lane of topo delivers (warnStranded). A failure to
// look is logged, and topo returned as it is.
func WithRetiredShards(ctx context.Context, b queue.Backend, topo topology.Topology, log *slog.Logger) topology.Topology {
	lister, ok := b.(queue.Lister)
	if !ok {
		return topo
	}
	names, err := lister.ListQueues(ctx, topo.Prefix+"-")
	if err != nil {
		log.WarnContext(ctx, "could not list the queues to find shard queues past a lane's shards; jobs left in such queues are not delivered", slog.Any("error", err))
		return topo
	}
	var past []string // shard queues past their lane's shards
	for _, l := range topo.Lanes {
		for i := l.Shards; i < topology.MaxShards; i++ {
			if name := topo.ShardQueue(l.Name, i); slices.Contains(names, name) {
				past = append(past, name)
			}
		}
	}
	warnStranded(ctx, b, lister, topo, names, past, log)
	if len(past) == 0 {
		return topo
	}
	stats, err := b.Stats(ctx, &queue.StatsParams{Queues: past})
	if err != nil {
		log.WarnContext(ctx, "could not count the jobs in shard queues past a lane's shards; they are not delivered", slog.Any("queues", past), slog.Any("error", err))
		return topo
	}
	var held []string
	jobs := map[string]int64{}
	for i, st := range stats {
		if n := st.Visible + st.InFlight + st.Delayed; n > 0 {
			held = append(held, past[i])
			jobs[past[i]] = n
		}
	}
	out := topo.WithRetiredShards(held)
	for _, l := range out.Lanes {
		if l.RetiredShards == 0 {
			continue
		}
		var queues []string
		var n int64
		for i := l.Shards; i < l.Shards+l.RetiredShards; i++ {
			name := topo.ShardQueue(l.Name, i)
			queues, n = append(queues, name), n+jobs[name]
		}
		log.WarnContext(ctx, "the lane has fewer shards than before and its removed shard queues hold jobs: they are drained, and get no new job", slog.String("lane", l.Name), slog.Int("shards", l.Shards), slog.Any("retired_queues", queues), slog.Int64("jobs", n))
	}
	return out
}

// warnStranded logs the queues that hold jobs no process of this
// topology delivers: those under its prefix that no lane names (a lane
// removed from --queues while it held jobs) and, on the embedded store,
// which holds sluice's queues only, those under another prefix (the
// prefix changed). Such jobs sat there without a word (found in a
// walkthrough). names are the queues under topo's prefix; past are the
// shard queues past their lane's shards, which are drained.
func warnStranded(ctx context.Context, b queue.Backend, lister queue.Lister, topo topology.Topology, names, past []string, log *slog.Logger) {
	known := map[string]bool{}
	for _, n := range topo.Names() {
		known[n] = true
	}
	for _, n := range past {
		known[n] = true
	}
	var other []string
	for _, n := range names {
		if !known[n] {
			other = append(other, n)
		}
	}
	if _, embedded := b.(*embeddedqueue.Backend); embedded {
		all, err := lister.ListQueues(ctx, "")
		if err != nil {
			log.WarnContext(ctx, "could not list the queues to find those of another prefix", slog.Any("error", err))
		}
		for _, n := range all {
			if !strings.HasPrefix(n, topo.Prefix+"-") {
				other = append(other, n)
			}
		}
	}
	if len(other) == 0 {
		return
	}
	stats, err := b.Stats(ctx, &queue.StatsParams{Queues: other})
	if err != nil {
		log.WarnContext(ctx, "could not count the jobs in queues that no lane of --queues names", slog.Any("queues", other), slog.Any("error", err))
		return
	}
	var stranded []string
	var jobs int64
	for i, st := range stats {
		if n := st.Visible + st.InFlight + st.Delayed; n > 0 {
			stranded = append(stranded, fmt.Sprintf("%s (%d)", other[i], n))
			jobs += n
		}
	}
	if len(stranded) > 0 {
		log.WarnContext(ctx, "queues that no lane of --queues names hold jobs, and nothing here delivers them: "+
			"a lane removed, or the prefix changed, while they held jobs; put the lane (or the prefix) back until they are empty "+
			"(unless another deployment with its own --queues uses them)",
			slog.String("prefix", topo.Prefix), slog.Any("queues", stranded), slog.Int64("jobs", jobs))
	}
}

// Target names where drainers deliver: at most one of a gRPC worker
// address and a webhook URL (push), or the built-in log sink; none of them
// means pull workers (PullFlags).
type Target struct {
	WorkerAddr    string
	WebhookURL    string
	WebhookSecret string
	LogSink       bool
	// HandlerTimeout bounds one push delivery (a gRPC worker's Process
	// call or a webhook request); past it the attempt fails and is
	// retried. Pull workers hold leases instead (--worker-lease-timeout).
	HandlerTimeout time.Duration
	// WorkerDial sets the worker connection's transport (TLS.Worker);
	// nil is plaintext.
	WorkerDial grpc.DialOption
}

// Register adds the delivery target's flags to fs.
func (t *Target) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.WorkerAddr, "worker-addr", "", "push jobs to the gRPC worker at this address (sluice.worker.v1.WorkerService) instead of serving pull workers")
	fs.StringVar(&t.WebhookURL, "webhook-url", "", "push jobs to this HTTP URL instead of serving pull workers")
	fs.StringVar(&t.WebhookSecret, "webhook-secret", "", "HMAC-SHA256 key for the X-Sluice-Signature header of webhook posts")
	fs.BoolVar(&t.LogSink, "log-sink", false, "log each job and ack it instead of serving pull workers (a quick look, no worker needed)")
	flagconf.DurationVar(fs, &t.HandlerTimeout, "handler-timeout", drainer.HandlerTimeoutDefault, "most time one pushed delivery (a gRPC worker's call or a webhook request) may take before it counts as failed and is retried")
}

// Validate checks the flags' values, naming the flag at fault. A
// --webhook-secret without --webhook-url is refused: it was ignored, so an
// operator who set SLUICE_WEBHOOK_SECRET and mistyped the URL's variable
// ran a gateway that served pull workers and delivered nothing to the
// webhook, with no word of why.
func (t Target) Validate() error {
	if t.HandlerTimeout <= 0 {
		return fmt.Errorf("--handler-timeout %s: must be positive, such as 15m (the longest a job may run)", t.HandlerTimeout)
	}
	if t.WebhookSecret != "" && t.WebhookURL == "" {
		return errors.New("--webhook-secret signs the posts to --webhook-url, and none is given: add --webhook-url, or leave --webhook-secret out")
	}
	return nil
}

// CheckHandlerTimeout refuses a --handler-timeout that the backend cannot
// hold a job's lease for: Amazon SQS keeps a received message invisible
// for at most 12 hours in all, however often its visibility is extended,
// so on SQS a longer delivery would lose its lease and the job would go to
// another worker while the first still runs it.
func CheckHandlerTimeout(backend string, t Target) error {
	if backend == "sqs" && t.HandlerTimeout > queue.MaxVisibilityTimeout {
		return fmt.Errorf("--handler-timeout %s: with --backend sqs a delivery may last at most %s (SQS holds a received message for at most that in all, so a longer one is handed to another worker while it runs); split the work into shorter jobs, or use the embedded backend", t.HandlerTimeout, queue.MaxVisibilityTimeout)
	}
	return nil
}

// Pull reports whether the drainers serve pull workers (no push target).
func (t Target) Pull() bool { return t.WorkerAddr == "" && t.WebhookURL == "" && !t.LogSink }

// Handler returns the delivery target's handler, or nil for pull workers.
// The returned close func releases its connection.
func Handler(t Target, log *slog.Logger) (drainer.Handler, func() error, error) {
	noop := func() error { return nil }
	workerAddr := t.WorkerAddr
	switch {
	case workerAddr != "" && t.WebhookURL != "", t.LogSink && (workerAddr != "" || t.WebhookURL != ""):
		return nil, nil, errors.New("give one of --worker-addr, --webhook-url and --log-sink")
	case t.WebhookURL != "":
		u, err := url.Parse(t.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, nil, fmt.Errorf("--webhook-url %q: want an http:// or https:// URL", t.WebhookURL)
		}
		return &drainer.Webhook{URL: t.WebhookURL, Secret: t.WebhookSecret}, noop, nil
	case t.LogSink:
		return drainer.LogHandler{Logger: log}, noop, nil
	case workerAddr == "":
		return nil, noop, nil // pull workers
	}
	dial := t.WorkerDial
	if dial == nil {
		dial = grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	conn, err := grpc.NewClient(workerAddr, dial)
	if err != nil {
		return nil, nil, fmt.Errorf("worker address %q (--worker-addr): %w", workerAddr, err)
	}
	return drainer.NewGRPCWorker(conn), conn.Close, nil
}

// TenantLimits returns the drainers' per-tenant scheduling limits from the
// current tenant config. A tenant the config no longer knows (its jobs may
// outlive it) gets the standard tier's limits. A tenant without a weight
// of its own takes its lane's (topology).
func TenantLimits(current func() *tenant.Config, topo topology.Topology) func(string) scheduler.Limits {
	return func(id string) scheduler.Limits {
		cfg := current()
		l, _ := cfg.Tier("standard")
		if t, ok := cfg.Tenant(id); ok {
			l = t.Limits
		}
		weight := l.Weight
		if lane, ok := topo.Lane(l.Lane); ok && weight == 0 {
			weight = float64(lane.Weight)
		}
		maxBurst := l.MaxDrainBurst
		if maxBurst == 0 {
			maxBurst = int(math.Ceil(l.MaxDrainRate))
		}
		return scheduler.Limits{
			Weight: weight, MinShare: l.MinShare,
			FairRate: l.DrainRate, FairBurst: l.DrainBurst,
			MaxRate: l.MaxDrainRate, MaxBurst: maxBurst,
			MaxInFlight: l.MaxInFlight,
		}
	}
}

// DrainConfig configures RunDrain.
type DrainConfig struct {
	Backend  queue.Backend
	Topology topology.Topology
	// Handler receives the jobs; nil serves pull workers on Pull.Listen,
	// authenticated by WorkerKeys.
	Handler drainer.Handler
	// HandlerTimeout bounds each delivery to Handler (Target.HandlerTimeout;
	// 0 is the drainer's default).
	HandlerTimeout time.Duration
	Pull           PullFlags
	// WorkerKeys authenticates pull workers (see WorkerKeys).
	WorkerKeys func(string) (*tenant.Worker, bool)
	// WorkerTLS and WorkerTLSMode are the pull listener's, as AdminTLS.
	WorkerTLS     []grpc.ServerOption
	WorkerTLSMode string
	// PullListening, if set, is told the pull listener's address.
	PullListening func(addr string)
	// Tenants gives the per-tenant drain limits, reloaded live, and
	// answers the admin API's GetTenantLimits.
	Tenants       *tenant.Live
	Policy        sideliner.Policy
	SidelineShare int
	// ReadAhead is drainer.Config.ReadAhead (--read-ahead).
	ReadAhead int
	// ReceiveLinger is drainer.Config.ReceiveLinger
	// (BackendFlags.DrainReceiveLinger).
	ReceiveLinger time.Duration
	Metrics       *metrics.Metrics
	Concurrency   int
	AdminListen   string
	AdminKey      string
	// AdminTLS is the admin listener's TLS: its server options (from
	// TLS.Admin; none is plaintext) and its mode for the log line.
	AdminTLS      []grpc.ServerOption
	AdminTLSMode  string
	ShutdownGrace time.Duration
	Logger        *slog.Logger
	// Console, when set, serves the web console (ConsoleFlags.ConsoleHook):
	// given the admin listener and a gRPC server of the admin API for its
	// calls, it returns the listener left for gRPC and a stop function.
	Console ConsoleHook
}

// RunDrain runs drainers and the admin API until ctx ends, then stops
// both at once, within one grace period: the admin listener drains its
// calls while the drainers finish or hand back their deliveries.
func RunDrain(ctx context.Context, cfg DrainConfig) error {
	handler, handlerTimeout := cfg.Handler, cfg.HandlerTimeout
	var d *drainer.Drainer
	var hub *pull.Hub
	if handler == nil {
		var lanes []string
		for _, l := range cfg.Topology.Lanes {
			lanes = append(lanes, l.Name)
		}
		var err error
		hub, err = pull.New(pull.Config{
			Authenticate: cfg.WorkerKeys, KeysVersion: cfg.Tenants.Version, Lanes: lanes, LeaseTimeout: cfg.Pull.LeaseTimeout,
			Capacity: func(slots int, lanes map[string]int) { d.SetCapacity(slots, lanes) },
			Metrics:  cfg.Metrics, Logger: cfg.Logger,
		})
		if err != nil {
			return err
		}
		// The hub times out each lease itself (the worker may extend it).
		handler, handlerTimeout = hub, pull.MaxLeaseTimeout+time.Minute
	}
	d, err := drainer.New(drainer.Config{
		Backend:        cfg.Backend,
		Topology:       cfg.Topology,
		Handler:        handler,
		HandlerTimeout: handlerTimeout,
		Limits:         TenantLimits(cfg.Tenants.Config, cfg.Topology),
		Policy:         cfg.Policy,
		Metrics:        cfg.Metrics,
		SidelineShare:  cfg.SidelineShare,
		ReadAhead:      cfg.ReadAhead,
		ReceiveLinger:  cfg.ReceiveLinger,
		Concurrency:    cfg.Concurrency,
		Logger:         cfg.Logger,
	})
	if err != nil {
		return err
	}
	lis, err := serve.Listen(cfg.AdminListen, "admin-listen")
	if err != nil {
		return err
	}
	unary, stream := admin.Auth(cfg.AdminKey)
	// Admin requests are small: refuse big ones before decoding them.
	opts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(admin.MaxRequestBytes)}, cfg.AdminTLS...)
	srv := serve.NewServer(cfg.Logger, []grpc.UnaryServerInterceptor{unary}, []grpc.StreamServerInterceptor{stream}, opts...)
	adminSrv := admin.NewServer(cfg.Backend, cfg.Topology, cfg.Logger)
	adminSrv.ServeTenants(cfg.Tenants)
	adminSrv.ServeFairness(func(top int) *adminv1.GetFairnessResponse { return FairnessReport(d, top) })
	adminv1.RegisterAdminServiceServer(srv.GRPC, adminSrv)
	if cfg.Console != nil {
		// The console calls the admin API in process, over a pipe, so it
		// gets a server of its own with the same authorization and none
		// of the admin listener's TLS: given the TLS one, its plaintext
		// client failed every call ("io: read/write on closed pipe") and
		// the console showed nothing but that error.
		consoleSrv := serve.NewServer(cfg.Logger, []grpc.UnaryServerInterceptor{unary}, []grpc.StreamServerInterceptor{stream}, grpc.MaxRecvMsgSize(admin.MaxRequestBytes))
		adminv1.RegisterAdminServiceServer(consoleSrv.GRPC, adminSrv)
		defer consoleSrv.GRPC.Stop()
		grpcLis, stopConsole, err := cfg.Console(ctx, lis, consoleSrv.GRPC)
		if err != nil {
			return errors.Join(err, lis.Close())
		}
		defer stopConsole()
		lis = grpcLis
	}
	var pullSrv *pullServer
	if hub != nil {
		if pullSrv, err = startPull(ctx, cfg, hub); err != nil {
			return errors.Join(err, lis.Close())
		}
	}
	if err := errors.Join(adminSrv.Start(ctx), d.Start(ctx)); err != nil {
		if pullSrv != nil {
			err = errors.Join(err, pullSrv.stop(ctx))
		}
		return errors.Join(err, lis.Close())
	}
	cfg.Logger.InfoContext(ctx, "admin API listening", slog.String("addr", lis.Addr().String()), slog.String("tls", cmp.Or(cfg.AdminTLSMode, "off")))
	// The admin server drains its calls while the drainers stop, both
	// within one grace from ctx's end. It drained them first, with the
	// drainers still polling and delivering, and the drainers then had a
	// grace of their own: an admin call left open (a health watch, a list
	// waiting for a replay's scan) made a stop take twice the grace
	// (found in review).
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis, cfg.ShutdownGrace) }()
	var serveErr error
	serveDone := false
	select {
	case serveErr = <-served: // failed before ctx ended
		serveDone = true
	case <-ctx.Done():
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
	defer cancel()
	// Pull workers stay connected while the drainers stop, to answer the
	// jobs they hold; then their sessions end. The admin API stops beside
	// the drainers, not after them: after deliveries had used up the
	// grace, its replays got no time to hand their messages back before
	// the store closed (found in review).
	var adminErr error
	var stopping sync.WaitGroup
	stopping.Go(func() { adminErr = adminSrv.Stop(stopCtx) })
	stopErr := d.Stop(stopCtx)
	stopping.Wait()
	stopErr = errors.Join(stopErr, adminErr)
	if pullSrv != nil {
		stopErr = errors.Join(stopErr, pullSrv.stop(stopCtx))
	}
	if !serveDone {
		serveErr = <-served
	}
	c := d.Counts()
	cfg.Logger.InfoContext(ctx, "drainer stopped", slog.Int64("delivered", c.Delivered), slog.Int64("retried", c.Retried),
		slog.Int64("spilled", c.Spilled), slog.Int64("backlogged", c.Backlogged), slog.Int64("dropped", c.Dropped),
		slog.Int64("dead_lettered", c.DeadLettered), slog.Int64("lease_lost", c.LeaseLost))
	return errors.Join(serveErr, stopErr)
}

// Stopped returns err, or nil when err says only that ctx, ended by a stop
// signal, cut the work short: a stop during start-up failed the work under
// way with ctx (opening the store, creating the queues), and the process
// exited with status 1 and "context canceled" for the stop it was asked
// for (found in review).
func Stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// AdminKey returns the admin API's key: flagValue, the --admin-key flag's
// value, when it is set; else the key in <dataDir>/admin-key, made on
// first use (SecretFile). A key shorter than tenant.MinKeyLen is refused, saying
// where it came from: one of 5 characters was taken, where tenant and
// worker keys that short are refused (found in a walkthrough).
func AdminKey(flagValue, dataDir string) (string, error) {
	if flagValue == "" {
		return SecretFile(filepath.Join(dataDir, "admin-key"), "sk_admin_")
	}
	if len(flagValue) < tenant.MinKeyLen {
		from, fix := "--admin-key (on the command line, or admin-key: in the --config file)", "give a longer one, or leave it out"
		if os.Getenv("SLUICE_ADMIN_KEY") == flagValue {
			from, fix = "SLUICE_ADMIN_KEY", "set a longer one, or unset it"
		}
		return "", fmt.Errorf("%s is %d characters, and an admin key needs at least %d: %s to use (and create) %s",
			from, len(flagValue), tenant.MinKeyLen, fix, filepath.Join(dataDir, "admin-key"))
	}
	return flagValue, nil
}

// SecretFile returns the secret stored in path, creating a random one with
// the given prefix on first use, so development keys survive restarts. A
// file that holds only white space, or a key shorter than tenant.MinKeyLen, is an
// error. A new key is written whole or not at all (writeFileAtomic): a
// failed write leaves no file, and the next start makes one.
func SecretFile(path, prefix string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		// An empty file gave the empty key, which no call can present:
		// the admin API refused every key with nothing to say why
		// (found in review).
		key := strings.TrimSpace(string(data))
		switch {
		case key == "":
			return "", fmt.Errorf("%s is empty: write a key in it, or delete it to have one made", path)
		case len(key) < tenant.MinKeyLen:
			return "", fmt.Errorf("%s holds a key of %d characters, and a key needs at least %d: write a longer one in it, or delete it to have one made", path, len(key), tenant.MinKeyLen)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", fmt.Errorf("create data directory (--data-dir): %w", err)
	}
	buf := make([]byte, 20)
	_, _ = rand.Read(buf)
	key := prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(buf))
	if err := writeFileAtomic(path, []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	return key, nil
}

// writeFileAtomic makes path hold data, or leaves it as it was: data goes
// to a temporary file in path's directory, which is synced, renamed over
// path, and the directory synced. os.WriteFile left an empty key file
// when the write failed (a full disk at the first start) or the machine
// stopped before the file reached the disk (an ext4 abort emptied
// admin-key and worker-key), and an empty key file stops every start
// until the operator acts, one file per restart (found by a tester). The
// error names path once: the *PathError of a write named the temporary
// file, or path twice.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, bareError(err))
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
			err = fmt.Errorf("write %s: %w", path, bareError(err))
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is synced.
	return dirsync.Sync(filepath.Dir(path))
}

// bareError is err without the file name an *os.PathError or
// *os.LinkError carries, for a message that names the file itself:
// "write data/admin-key: no space left on device", not "write
// data/admin-key: write data/admin-key: …".
func bareError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// PolicyFlags registers the drain policy flags shared by both binaries.
func PolicyFlags(fs *flag.FlagSet, p *sideliner.Policy, share, readAhead *int) {
	fs.IntVar(&p.MaxAttempts, "max-attempts", sideliner.MaxAttemptsDefault, "delivery attempts before a job is dead-lettered")
	flagconf.DurationVar(fs, &p.RetryBase, "retry-base", sideliner.RetryBaseDefault, "least delay before a retry; doubles per attempt, with jitter")
	flagconf.DurationVar(fs, &p.RetryCap, "retry-cap", sideliner.RetryCapDefault, "longest retry backoff (at most 15m)")
	fs.IntVar(share, "sideline-share", 10, "percent of the delivery slots guaranteed to spillover and backlog work while it waits")
	fs.IntVar(readAhead, "read-ahead", 0, "most fresh jobs of one tenant held in memory waiting for a slot; more are moved to the spillover queue (0: an equal share, among the tenants holding jobs, of the read-ahead less the quarter kept for spillover and backlog work)")
	fs.Var(sidelineFlag{&p.NoSideline}, "sideline", "spill over-rate and backlog stale jobs (default true); false delivers each lane's jobs in the order read with no tenant drain limits (a plain FIFO per lane, the benchmarks' baseline)")
}

// CheckPolicyFlags checks the values of the flags PolicyFlags registers,
// naming the flag to fix; callers check them before anything listens.
// The drainer's own checks name its Config fields, and took 0 attempts
// as the default (found in review).
func CheckPolicyFlags(p sideliner.Policy, share, readAhead int) error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("--max-attempts %d: must be at least 1", p.MaxAttempts)
	case share < 1 || share > 99:
		return fmt.Errorf("--sideline-share %d: must be a percent from 1 to 99", share)
	case readAhead < 0:
		return fmt.Errorf("--read-ahead %d: must not be negative (0 for an equal share among the tenants holding jobs)", readAhead)
	}
	// sideliner.Policy.Validate names no flag (found in review). A 0,
	// which the flags' defaults never are, was taken as the default
	// (found in review).
	switch {
	case p.RetryCap <= 0 || p.RetryCap > sideliner.MaxDelay:
		return fmt.Errorf("--retry-cap %s: must be positive and at most %s (SQS's longest delay)", p.RetryCap, sideliner.MaxDelay)
	case p.RetryBase <= 0 || p.RetryBase > p.RetryCap:
		return fmt.Errorf("--retry-base %s: must be positive, such as %s, and at most --retry-cap (%s)", p.RetryBase, sideliner.RetryBaseDefault, p.RetryCap)
	}
	return nil
}

// sidelineFlag is the boolean --sideline, stored negated in
// sideliner.Policy.NoSideline so that the zero Policy sidelines.
type sidelineFlag struct{ off *bool }

func (f sidelineFlag) IsBoolFlag() bool { return true }

func (f sidelineFlag) String() string {
	if f.off == nil {
		return "true"
	}
	return strconv.FormatBool(!*f.off)
}

func (f sidelineFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f.off = !on
	return nil
}

// CloseBackend logs the backend's API call counts and closes it, logging
// a failure (for use in a defer at shutdown).
func CloseBackend(b queue.Backend, log *slog.Logger) {
	LogAPICalls(b, log)
	if err := b.Close(); err != nil {
		log.Error("close backend", slog.Any("error", err))
	}
}

// LogAPICalls logs a backend's API call counts by operation, when it keeps
// them (the SQS backend does), so the cost per job can be read off a run,
// and the receive answers it lost after SQS sent them.
func LogAPICalls(b queue.Backend, log *slog.Logger) {
	counter, ok := b.(interface{ APICalls() map[string]int64 })
	if !ok {
		return
	}
	calls := counter.APICalls()
	attrs := make([]any, 0, len(calls)+1)
	var total int64
	for op, n := range calls {
		attrs = append(attrs, slog.Int64(op, n))
		total += n
	}
	attrs = append(attrs, slog.Int64("total", total))
	if lost, ok := b.(interface{ ReceiveAnswersLost() int64 }); ok {
		// Each hid its messages for their visibility timeout: the reason
		// for jobs that late (sqsqueue.Backend.ReceiveAnswersLost).
		attrs = append(attrs, slog.Int64("receive_answers_lost", lost.ReceiveAnswersLost()))
	}
	log.Info("backend API calls", attrs...)
}

// FairnessReport turns d's fairness figures into the admin API's answer.
func FairnessReport(d *drainer.Drainer, top int) *adminv1.GetFairnessResponse {
	slots, busy := d.Slots()
	resp := &adminv1.GetFairnessResponse{Slots: int32(slots), Busy: int32(busy)}
	for _, g := range d.Fairness(top) {
		lane := &adminv1.LaneFairness{
			Lane: g.Group, Utilization: g.Utilization, JainIndex: g.Jain, Held: int64(g.Held),
			DeliveriesPerSecond: g.DeliveriesPerSecond,
		}
		for _, t := range g.Tenants {
			lane.Tenants = append(lane.Tenants, &adminv1.TenantFairness{
				Tenant: t.Tenant, Share: t.Share, Weight: t.Weight, State: string(t.State),
				InFlight: int32(t.InFlight), Held: int32(t.Held), Backlogged: t.Backlogged,
			})
		}
		resp.Lanes = append(resp.Lanes, lane)
	}
	return resp
}
