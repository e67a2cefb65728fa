package metrics

import (
	"cmp"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metric names. The CloudWatch publisher (package cloudwatchpub) derives its
// metric names from these.
const (
	NameJobsSubmitted     = "sluice_jobs_submitted_total"
	NameEnqueueLatency    = "sluice_enqueue_latency_seconds"
	NameQueueVisible      = "sluice_queue_visible_messages"
	NameQueueInFlight     = "sluice_queue_in_flight_messages"
	NameQueueDelayed      = "sluice_queue_delayed_messages"
	NameQueueOldestAge    = "sluice_queue_oldest_message_age_seconds"
	NameDrainActions      = "sluice_drain_actions_total"
	NameDwell             = "sluice_dwell_seconds"
	NameAgeOfFirstAttempt = "sluice_age_of_first_attempt_seconds"
	NameBackendCalls      = "sluice_backend_calls_total"
	// NameReceiveAnswersLost counts receive answers the queue service sent
	// and the client could not read (SQS): their jobs come late by the
	// visibility timeout.
	NameReceiveAnswersLost = "sluice_backend_receive_answers_lost_total"
	NameTenantReloads      = "sluice_tenant_config_reloads_total"
	NameDrainUtilization   = "sluice_drain_utilization_ratio"
	NameDrainFairness      = "sluice_drain_fairness_index"
	NameDrainHeld          = "sluice_drain_held_jobs"
	NameDrainTopShare      = "sluice_drain_top_tenant_share"
	// NameDrainTenantShare is labelled by tenant: Prometheus only, never
	// published to CloudWatch (which would add the shares up).
	NameDrainTenantShare = "sluice_drain_tenant_share"
	// Pull workers (package pull), per lane.
	NamePullWorkers        = "sluice_pull_workers"
	NamePullCreditsGranted = "sluice_pull_credits_granted"
	NamePullCreditsUsed    = "sluice_pull_credits_used"
	NamePullReleased       = "sluice_pull_leases_released_total"
	NameStoreWrite         = "sluice_store_write_seconds"
	NameStoreWriteOps      = "sluice_store_write_operations_total"
	NameStoreCheckpoint    = "sluice_store_checkpoint_seconds"
	NameStoreCorrupt       = "sluice_store_corrupt_messages_total"
)

// OtherValue replaces a label value that is not kept: a tenant outside the
// top K, an unknown outcome or action, or a value past its label's bound.
const OtherValue = "other"

// Defaults for Options fields left zero.
const (
	// TopTenantsDefault is the number of tenants given their own tenant
	// label value.
	TopTenantsDefault = 20
	// TenantRefreshDefault is how often the top K is recomputed and how
	// fast tenant volumes decay (they halve at each refresh).
	TenantRefreshDefault = time.Minute
)

// Bounds on label values that come from configuration or code rather than
// from a fixed list: past the bound a new value is recorded as "other".
const (
	maxLanes      = 64
	maxTiers      = 64
	maxQueues     = 4096
	maxKinds      = 16
	maxReasons    = 64
	maxOperations = 64
	maxValueLen   = 128
)

// Submit outcomes (the outcome label of sluice_jobs_submitted_total).
const (
	OutcomeAdmitted         = "admitted"
	OutcomeDuplicate        = "duplicate"
	OutcomeThrottledRate    = "throttled_rate"
	OutcomeThrottledBacklog = "throttled_backlog"
	OutcomeInvalid          = "invalid"
	OutcomeUnauthenticated  = "unauthenticated"
	OutcomeUnavailable      = "unavailable"
	// OutcomeCanceled: the caller's context ended (its deadline or a
	// cancel) before the job was stored; not a backend failure.
	OutcomeCanceled = "canceled"
)

// Drain actions (the action label of sluice_drain_actions_total). They
// match drainer.Counts.
const (
	ActionDelivered    = "delivered"
	ActionRetried      = "retried"
	ActionSpilled      = "spilled"
	ActionBacklogged   = "backlogged"
	ActionDropped      = "dropped"
	ActionDeadLettered = "dead_lettered"
	ActionDeferred     = "deferred"
	ActionRequeued     = "requeued"
	ActionLeaseLost    = "lease_lost"
	ActionMoveFailed   = "move_failed"
	ActionPanicked     = "panicked"
	ActionReleased     = "released"
)

var (
	outcomes = set(OutcomeAdmitted, OutcomeDuplicate, OutcomeThrottledRate, OutcomeThrottledBacklog,
		OutcomeInvalid, OutcomeUnauthenticated, OutcomeUnavailable, OutcomeCanceled)
	actions = set(ActionDelivered, ActionRetried, ActionSpilled, ActionBacklogged, ActionDropped,
		ActionDeadLettered, ActionDeferred, ActionRequeued, ActionLeaseLost, ActionMoveFailed, ActionPanicked, ActionReleased)
)

func set(vs ...string) map[string]bool {
	m := make(map[string]bool, len(vs))
	for _, v := range vs {
		m[v] = true
	}
	return m
}

// Options configures New. The zero Options is usable.
type Options struct {
	// TopTenants is K, the number of tenants that get their own value of
	// the tenant label on sluice_jobs_submitted_total; every other tenant is
	// counted as "other". Defaults to 20; a negative value labels no tenant.
	TopTenants int
	// TenantRefresh is how often the top K is recomputed from the tenants'
	// recent volumes. Defaults to 1 minute.
	TenantRefresh time.Duration
}

// Metrics holds sluice's Prometheus collectors. A nil *Metrics is valid and
// records nothing (so tests and embedding code can pass nil). All methods
// are safe for concurrent use.
type Metrics struct {
	submitted         *prometheus.CounterVec
	enqueueLatency    *prometheus.HistogramVec
	queueVisible      *prometheus.GaugeVec
	queueInFlight     *prometheus.GaugeVec
	queueDelayed      *prometheus.GaugeVec
	queueOldestAge    *prometheus.GaugeVec
	drainActions      *prometheus.CounterVec
	dwell             *prometheus.HistogramVec
	ageOfFirstAttempt *prometheus.HistogramVec
	backendCalls      *prometheus.CounterVec
	answersLost       *prometheus.CounterVec // no labels, as the store's series
	tenantReloads     *prometheus.CounterVec
	drainUtilization  *prometheus.GaugeVec
	drainFairness     *prometheus.GaugeVec
	drainHeld         *prometheus.GaugeVec
	drainTopShare     *prometheus.GaugeVec
	drainTenantShare  *prometheus.GaugeVec
	pullWorkers       *prometheus.GaugeVec
	pullGranted       *prometheus.GaugeVec
	pullUsed          *prometheus.GaugeVec
	pullReleased      *prometheus.CounterVec
	// The store's series have no labels; as vectors they appear only
	// once a write is recorded (embedded backend), like the others.
	storeWrite    *prometheus.HistogramVec
	storeWriteOps *prometheus.CounterVec
	checkpoint    *prometheus.HistogramVec
	storeCorrupt  *prometheus.CounterVec
	fairnessMu    sync.Mutex // one lane's tenant shares are replaced as a whole

	tenants *topK

	lanes, tiers, queues, kinds, reasons, operations *bounded
}

// Histogram buckets, in seconds.
var (
	// enqueueBuckets spans a group-committed fsync (sub-millisecond) to a
	// slow SQS SendMessageBatch with retries (seconds).
	enqueueBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// waitBuckets spans an idle lane (milliseconds) to a drained backlog
	// (hours; SQS keeps messages up to 14 days).
	waitBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}
)

// New creates sluice's collectors and registers them with reg (a nil reg
// leaves them unregistered). Like prometheus.MustRegister it panics if reg
// already holds collectors of the same names: create one Metrics per
// registry and share it between the gateway and in-process drainers.
func New(reg prometheus.Registerer, opts Options) *Metrics {
	k := cmp.Or(opts.TopTenants, TopTenantsDefault)
	k = max(k, 0)
	m := &Metrics{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameJobsSubmitted,
			Help: "Submit calls by outcome, tier, lane and tenant (tenant only for the top K tenants by recent volume, \"other\" for the rest).",
		}, []string{"tenant", "tier", "lane", "outcome"}),
		enqueueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameEnqueueLatency,
			Help:    "Time for the queue backend to store an admitted job durably, by lane.",
			Buckets: enqueueBuckets,
		}, []string{"lane"}),
		queueVisible: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameQueueVisible,
			Help: "Messages ready to be received, per queue (approximate on SQS).",
		}, []string{"queue", "lane", "kind"}),
		queueInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameQueueInFlight,
			Help: "Messages received and not yet deleted or expired, per queue.",
		}, []string{"queue", "lane", "kind"}),
		queueDelayed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameQueueDelayed,
			Help: "Messages sent with a delay that has not yet passed, per queue.",
		}, []string{"queue", "lane", "kind"}),
		queueOldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameQueueOldestAge,
			Help: "Age of the oldest message per queue; 0 when empty or unknown.",
		}, []string{"queue", "lane", "kind"}),
		drainActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameDrainActions,
			Help: "What the drainers did with each job they read, by lane, action and sideliner reason.",
		}, []string{"lane", "action", "reason"}),
		dwell: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameDwell,
			Help:    "Time from the gateway accepting a job to the start of a delivery attempt, by lane.",
			Buckets: waitBuckets,
		}, []string{"lane"}),
		ageOfFirstAttempt: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameAgeOfFirstAttempt,
			Help:    "Time from the gateway accepting a job to the start of its first delivery attempt, by lane; retries are not counted.",
			Buckets: waitBuckets,
		}, []string{"lane"}),
		backendCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameBackendCalls,
			Help: "Queue backend API requests by operation, retries included.",
		}, []string{"operation"}),
		answersLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameReceiveAnswersLost,
			Help: "Receive answers the queue service sent (HTTP 200) that the client could not read: their messages stay hidden until their visibility timeout runs out.",
		}, nil),
		tenantReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameTenantReloads,
			Help: "Tenant config reloads (SIGHUP or a change to the file) by result: ok, or refused (the previous config stays).",
		}, []string{"result"}),
		drainUtilization: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameDrainUtilization,
			Help: "Busy delivery slots ÷ slots over the last tens of seconds, counted while the lane's jobs waited: 1 means no slot idle while work waited.",
		}, []string{"lane"}),
		drainFairness: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameDrainFairness,
			Help: "Jain's fairness index over the lane's active tenants' worker-time shares, each against its weighted max-min fair share (1 = every tenant got its fair share).",
		}, []string{"lane"}),
		drainHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameDrainHeld,
			Help: "Jobs of the lane read ahead by the drainer and waiting for a delivery slot (in flight on the queue, not yet delivering).",
		}, []string{"lane"}),
		drainTopShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameDrainTopShare,
			Help: "The largest share of the lane's recent worker time that one tenant used.",
		}, []string{"lane"}),
		drainTenantShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NameDrainTenantShare,
			Help: "Share of the lane's recent worker time of each of its top tenants, with the tenant's state (in_share, over_rate, capped, sidelined).",
		}, []string{"lane", "tenant", "state"}),
		pullWorkers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NamePullWorkers,
			Help: "Pull workers connected (Connect streams) serving the lane.",
		}, []string{"lane"}),
		pullGranted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NamePullCreditsGranted,
			Help: "Credits (jobs run at once) granted by the pull workers serving the lane; a stalled worker's count only what it holds.",
		}, []string{"lane"}),
		pullUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: NamePullCreditsUsed,
			Help: "Jobs held by the pull workers serving the lane (credits in use).",
		}, []string{"lane"}),
		pullReleased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NamePullReleased,
			Help: "Jobs handed back at once, unanswered, because their pull worker's stream ended.",
		}, []string{"lane"}),
		storeWrite: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameStoreWrite,
			Help:    "Time the embedded store's single writer took per group of operations (applying them and appending their redo log record: with --fsync=always, and its fdatasync), which every caller in the group waited for.",
			Buckets: enqueueBuckets,
		}, nil),
		storeWriteOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameStoreWriteOps,
			Help: "Operations (sends, receives, deletes, visibility changes) the embedded store's writer applied; ÷ the write count is the group-commit factor.",
		}, nil),
		checkpoint: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    NameStoreCheckpoint,
			Help:    "Time each checkpoint of the embedded store took (the commit of its redo log's changes into the store file, two fsyncs; every 50 ms), by outcome (ok or failed). Sends do not wait for it, nor receives of recent messages; receives of older ones do.",
			Buckets: enqueueBuckets,
		}, []string{"outcome"}),
		storeCorrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: NameStoreCorrupt,
			Help: "Messages the embedded store found damaged on disk (their checksum failed) and kept aside, undelivered, in its corrupt bucket; the ERROR log names each one's queue and message ID.",
		}, nil),

		lanes:      newBounded(maxLanes),
		tiers:      newBounded(maxTiers),
		queues:     newBounded(maxQueues),
		kinds:      newBounded(maxKinds),
		reasons:    newBounded(maxReasons),
		operations: newBounded(maxOperations),
	}
	m.tenants = newTopK(k, cmp.Or(opts.TenantRefresh, TenantRefreshDefault), time.Now, func(tenant string) {
		m.submitted.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
	})
	// A counter's series that first appears at 1 shows no increase to
	// rate() or increase(), so an alert on the first refused reload never
	// fired (found in a walkthrough): the results start at 0.
	m.tenantReloads.WithLabelValues("ok")
	m.tenantReloads.WithLabelValues("refused")
	if reg != nil {
		reg.MustRegister(m.submitted, m.enqueueLatency, m.queueVisible, m.queueInFlight, m.queueDelayed,
			m.queueOldestAge, m.drainActions, m.dwell, m.ageOfFirstAttempt, m.backendCalls, m.answersLost,
			m.tenantReloads, m.drainUtilization, m.drainFairness, m.drainHeld, m.drainTopShare, m.drainTenantShare,
			m.pullWorkers, m.pullGranted, m.pullUsed, m.pullReleased, m.storeWrite, m.storeWriteOps, m.checkpoint, m.storeCorrupt)
	}
	return m
}

// Submit counts one Submit call. outcome is one of the Outcome constants
// (anything else is counted as "other"). tenant is "" when the call was
// not authenticated; it is counted as "other".
func (m *Metrics) Submit(tenant, tier, lane, outcome string) {
	m.SubmitN(tenant, tier, lane, outcome, 1)
}

// SubmitN counts n jobs of one call with the same outcome, at the cost of
// one: a batch's jobs take the tracker's lock and look up the series once
// per outcome, not once per job.
func (m *Metrics) SubmitN(tenant, tier, lane, outcome string, n int) {
	if m == nil || n <= 0 {
		return
	}
	if !outcomes[outcome] {
		outcome = OtherValue
	}
	tier, lane = m.tiers.value(tier), m.lanes.value(lane)
	// The tracker's lock is held while the series is incremented, so a
	// concurrent refresh cannot delete the series and have this call
	// recreate it for a tenant no longer in the top K.
	m.tenants.do(tenant, n, func(label string) {
		m.submitted.WithLabelValues(label, tier, lane, outcome).Add(float64(n))
	})
}

// EnqueueLatency records how long the backend took to store an admitted job.
func (m *Metrics) EnqueueLatency(lane string, d time.Duration) {
	if m == nil {
		return
	}
	m.enqueueLatency.WithLabelValues(m.lanes.value(lane)).Observe(d.Seconds())
}

// QueueDepth sets one queue's gauges from a backend stats reading. kind is
// the queue's topology.Kind (shard, spillover, backlog, dlq).
func (m *Metrics) QueueDepth(queue, lane, kind string, visible, inFlight, delayed int64, oldest time.Duration) {
	if m == nil {
		return
	}
	lv := []string{m.queues.value(queue), m.lanes.value(lane), m.kinds.value(kind)}
	m.queueVisible.WithLabelValues(lv...).Set(float64(visible))
	m.queueInFlight.WithLabelValues(lv...).Set(float64(inFlight))
	m.queueDelayed.WithLabelValues(lv...).Set(float64(delayed))
	m.queueOldestAge.WithLabelValues(lv...).Set(oldest.Seconds())
}

// Drain counts one drainer action on a job. action is one of the Action
// constants (anything else is counted as "other"); reason is the
// sideliner.Reason of the decision, or "". Only the reason's code is kept:
// text after a colon ("permanent_failure: worker said …") is cut off.
func (m *Metrics) Drain(lane, action, reason string) {
	if m == nil {
		return
	}
	if !actions[action] {
		action = OtherValue
	}
	if i := strings.IndexByte(reason, ':'); i >= 0 {
		reason = reason[:i]
	}
	m.drainActions.WithLabelValues(m.lanes.value(lane), action, m.reasons.value(strings.TrimSpace(reason))).Inc()
}

// DrainSeries creates lane's drain-action series of each action and
// reason pair at 0, those a drainer may count, so that its first count is
// an increase that rate() and increase() see, and an alert on it fires.
func (m *Metrics) DrainSeries(lane string, pairs [][2]string) {
	if m == nil {
		return
	}
	for _, p := range pairs {
		if actions[p[0]] {
			m.drainActions.WithLabelValues(m.lanes.value(lane), p[0], m.reasons.value(p[1]))
		}
	}
}

// TenantShare is one tenant's share of a lane's recent worker time.
type TenantShare struct {
	Tenant, State string
	Share         float64
}

// Fairness sets a lane's fairness gauges: utilization and Jain's index
// (negative: unknown, as while the lane is idle; the series is removed,
// not left at its last value, which the dashboard showed as current for
// ever; found in review), jobs held, and its top tenants' shares, which
// replace the lane's previous ones.
func (m *Metrics) Fairness(lane string, utilization, jain float64, held int, top []TenantShare) {
	if m == nil {
		return
	}
	lane = m.lanes.value(lane)
	if utilization >= 0 {
		m.drainUtilization.WithLabelValues(lane).Set(utilization)
	} else {
		m.drainUtilization.DeleteLabelValues(lane)
	}
	if jain >= 0 {
		m.drainFairness.WithLabelValues(lane).Set(jain)
	} else {
		m.drainFairness.DeleteLabelValues(lane)
	}
	m.drainHeld.WithLabelValues(lane).Set(float64(held))
	largest := 0.0
	m.fairnessMu.Lock()
	defer m.fairnessMu.Unlock()
	m.drainTenantShare.DeletePartialMatch(prometheus.Labels{"lane": lane})
	for _, t := range top {
		largest = max(largest, t.Share)
		m.drainTenantShare.WithLabelValues(lane, t.Tenant, t.State).Set(t.Share)
	}
	m.drainTopShare.WithLabelValues(lane).Set(largest)
}

// Dwell records the time from acceptance to the start of a delivery attempt.
func (m *Metrics) Dwell(lane string, d time.Duration) {
	if m == nil {
		return
	}
	m.dwell.WithLabelValues(m.lanes.value(lane)).Observe(d.Seconds())
}

// PullWorkers sets a lane's pull workers, the credits they grant and the
// credits in use.
func (m *Metrics) PullWorkers(lane string, workers, granted, used int) {
	if m == nil {
		return
	}
	l := m.lanes.value(lane)
	m.pullWorkers.WithLabelValues(l).Set(float64(workers))
	m.pullGranted.WithLabelValues(l).Set(float64(granted))
	m.pullUsed.WithLabelValues(l).Set(float64(used))
}

// PullReleased counts n jobs of lane handed back when their pull worker's
// stream ended.
func (m *Metrics) PullReleased(lane string, n int) {
	if m == nil {
		return
	}
	m.pullReleased.WithLabelValues(m.lanes.value(lane)).Add(float64(n))
}

// AgeOfFirstAttempt records the time from acceptance to the start of a
// job's first delivery attempt. Call it for first attempts only: retries
// would mix a backlog with a failing worker.
func (m *Metrics) AgeOfFirstAttempt(lane string, d time.Duration) {
	if m == nil {
		return
	}
	m.ageOfFirstAttempt.WithLabelValues(m.lanes.value(lane)).Observe(d.Seconds())
}

// StoreWrite records one group the embedded store's writer applied: its
// operations and the time it took.
func (m *Metrics) StoreWrite(ops int, took time.Duration) {
	if m == nil {
		return
	}
	m.storeWrite.WithLabelValues().Observe(took.Seconds())
	m.storeWriteOps.WithLabelValues().Add(float64(ops))
}

// StoreCheckpoint records one checkpoint of the embedded store: the time
// it took and whether it failed.
func (m *Metrics) StoreCheckpoint(took time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	m.checkpoint.WithLabelValues(outcome).Observe(took.Seconds())
}

// StoreCorruptMessages counts n messages the embedded store kept aside
// as damaged. Zero makes the series, so that the first one shows as an
// increase.
func (m *Metrics) StoreCorruptMessages(n int) {
	if m == nil {
		return
	}
	m.storeCorrupt.WithLabelValues().Add(float64(n))
}

// BackendCall counts n queue backend API requests of one operation.
func (m *Metrics) BackendCall(op string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.backendCalls.WithLabelValues(m.operations.value(op)).Add(float64(n))
}

// ReceiveAnswersLost counts n receive answers the backend lost after the
// queue service sent them.
func (m *Metrics) ReceiveAnswersLost(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.answersLost.WithLabelValues().Add(float64(n))
}

// TenantConfigReload counts one reload that changed the config (ok) or was
// refused.
func (m *Metrics) TenantConfigReload(ok bool) {
	if m == nil {
		return
	}
	result := "refused"
	if ok {
		result = "ok"
	}
	m.tenantReloads.WithLabelValues(result).Inc()
}

// Handler serves g in the Prometheus exposition formats (text, OpenMetrics
// and protobuf, negotiated). A gathering error for one collector still
// serves the rest.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}

// bounded passes through at most max distinct label values (each at most
// maxValueLen bytes); later new values become OtherValue. Lookups of known
// values take no lock.
type bounded struct {
	max  int
	seen sync.Map // string → struct{}

	mu sync.Mutex
	n  int
}

func newBounded(n int) *bounded { return &bounded{max: n} }

func (b *bounded) value(v string) string {
	if _, ok := b.seen.Load(v); ok {
		return v
	}
	if len(v) > maxValueLen {
		return OtherValue
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen.Load(v); ok {
		return v
	}
	if b.n >= b.max {
		return OtherValue
	}
	b.n++
	b.seen.Store(v, struct{}{})
	return v
}
