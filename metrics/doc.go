// Package metrics holds sluice's Prometheus metrics: the gateway and the
// drainers record into one *Metrics, both binaries serve it on /metrics
// with Handler, and package cloudwatchpub publishes the same registry to
// Amazon CloudWatch, so both show the same figures.
//
// # Metrics
//
// Counters end in _total, durations are in seconds. CloudWatch names are
// the ones cloudwatchpub derives (namespace "Sluice" by default), with the
// dimensions it keeps; tenant is never a CloudWatch dimension.
//
//	name                                     type       labels                        CloudWatch (unit; dimensions)
//	sluice_jobs_submitted_total              counter    tenant, tier, lane, outcome   JobsSubmitted (Count; Tier, Lane, Outcome)
//	sluice_enqueue_latency_seconds           histogram  lane                          EnqueueLatency (Seconds; Lane)
//	sluice_queue_visible_messages            gauge      queue, lane, kind             QueueVisibleMessages (Count; Queue, Lane, Kind)
//	sluice_queue_in_flight_messages          gauge      queue, lane, kind             QueueInFlightMessages (Count; Queue, Lane, Kind)
//	sluice_queue_delayed_messages            gauge      queue, lane, kind             QueueDelayedMessages (Count; Queue, Lane, Kind)
//	sluice_queue_oldest_message_age_seconds  gauge      queue, lane, kind             QueueOldestMessageAge (Seconds; Queue, Lane, Kind)
//	sluice_drain_actions_total               counter    lane, action, reason          DrainActions (Count; Lane, Action, Reason)
//	sluice_dwell_seconds                     histogram  lane                          Dwell (Seconds; Lane)
//	sluice_age_of_first_attempt_seconds      histogram  lane                          AgeOfFirstAttempt (Seconds; Lane)
//	sluice_backend_calls_total               counter    operation                     BackendCalls (Count; Operation)
//	sluice_backend_receive_answers_lost_total counter                                 BackendReceiveAnswersLost (Count)
//	sluice_tenant_config_reloads_total       counter    result                        TenantConfigReloads (Count; Result)
//	sluice_drain_utilization_ratio           gauge      lane                          DrainUtilizationRatio (Count; Lane)
//	sluice_drain_fairness_index              gauge      lane                          DrainFairnessIndex (Count; Lane)
//	sluice_drain_held_jobs                   gauge      lane                          DrainHeldJobs (Count; Lane)
//	sluice_drain_top_tenant_share            gauge      lane                          DrainTopTenantShare (Count; Lane)
//	sluice_drain_tenant_share                gauge      lane, tenant, state           (Prometheus only)
//	sluice_pull_workers                      gauge      lane                          PullWorkers (Count; Lane)
//	sluice_pull_credits_granted              gauge      lane                          PullCreditsGranted (Count; Lane)
//	sluice_pull_credits_used                 gauge      lane                          PullCreditsUsed (Count; Lane)
//	sluice_pull_leases_released_total        counter    lane                          PullLeasesReleased (Count; Lane)
//	sluice_store_write_seconds               histogram                                StoreWrite (Seconds)
//	sluice_store_write_operations_total      counter                                  StoreWriteOperations (Count)
//	sluice_store_checkpoint_seconds          histogram  outcome                       StoreCheckpoint (Seconds; Outcome)
//	sluice_store_corrupt_messages_total      counter                                  StoreCorruptMessages (Count)
//
// What each one means:
//
//   - sluice_jobs_submitted_total: every Submit call the gateway answered,
//     by outcome: admitted (stored), duplicate (an idempotency key seen
//     within the window), throttled_rate (the tenant's token bucket),
//     throttled_backlog (the lane's high-water mark for the tier), invalid,
//     unauthenticated, unavailable (the backend did not store the job),
//     canceled (the caller's context ended first: its deadline or a
//     cancel, not a backend failure).
//     Jobs submitted = the sum; throttled by reason and tier = the
//     throttled_* outcomes by tier. tenant is described below; calls that
//     never reached a tenant (unauthenticated) count as tenant="other",
//     with no tier or lane, once per call: a SubmitBatch refused for its
//     key is refused before its jobs are read (gateway.TapAuth). A
//     SubmitBatch refused as a whole (no jobs, or too many) counts once
//     as invalid.
//   - sluice_enqueue_latency_seconds: how long the backend took to store an
//     admitted job durably (fsync, or SendMessageBatch on SQS).
//   - sluice_queue_*: the last depth reading of each queue (the depth cache
//     on a timer): visible, in flight, delayed, and the age of the oldest
//     message. kind is shard, spillover, backlog or dlq; DLQ depth is
//     sluice_queue_visible_messages{kind="dlq"}. Approximate on SQS.
//   - sluice_drain_actions_total: what the drainers did with each job they
//     read: delivered, retried, spilled, backlogged, dropped, dead_lettered,
//     deferred, requeued, lease_lost, move_failed, panicked, released (the
//     drainer.Counts), with
//     the sideliner reason of the decision (within_limits, read_ahead_full,
//     stale, ttl_expired, attempts_exhausted,
//     permanent_failure, retryable_failure, malformed_envelope,
//     expires_before_retry, released; "" when there is none). Sidelined by reason =
//     the spilled and backlogged actions by reason. delivered counts acks
//     only; a failed attempt counts once, as retried or, a job's last,
//     dead_lettered, so attempts ≈ delivered + retried + dead_lettered.
//   - sluice_dwell_seconds: time from acceptance by the gateway (or from
//     its replay out of a DLQ, for a replayed job) to the start of a
//     delivery attempt, every attempt.
//   - sluice_age_of_first_attempt_seconds: the same for first attempts only,
//     so retries of a failing worker do not mask a growing backlog (the
//     AgeOfFirstAttempt metric of "Avoiding insurmountable queue
//     backlogs").
//   - sluice_store_write_seconds, sluice_store_write_operations_total:
//     the embedded store's single writer, per group of operations it
//     applied (their redo log record; with --fsync=always, and its
//     fdatasync). Every send, receive, delete and move of the process
//     waits for one such write, so a slow disk or an overloaded writer
//     shows here first. Operations ÷ writes is the group-commit factor.
//     Embedded backend only.
//   - sluice_store_checkpoint_seconds: each commit of the redo log's
//     changes into the store file (every 50 ms, two fsyncs), by outcome.
//     It runs beside the writer; only receives of older messages wait for
//     it. Failures mean the file cannot grow (a full disk): the store then
//     commits every group at once and fails it until space returns.
//   - sluice_store_corrupt_messages_total: messages whose record failed
//     its checksum when received: a byte changed on disk. Each was kept
//     aside in the store's corrupt bucket, not delivered, and logged at
//     ERROR with its queue and message ID. Alarm on any increase: the
//     job must be submitted again, and the disk looked at. Starts at 0
//     on the embedded backend only.
//   - sluice_backend_calls_total: queue backend API requests by operation,
//     retries included (SQS bills each request). Divide by
//     sluice_drain_actions_total{action="delivered"} for calls per delivered
//     job.
//   - sluice_backend_receive_answers_lost_total: ReceiveMessage answers SQS
//     sent (HTTP 200) that the client could not read. SQS handed their
//     messages over, so they stay hidden until their visibility timeout
//     runs out: their jobs come that late (docs/operations.md,
//     first-attempt-age). Rare; many mean a network path that breaks
//     connections. SQS backend only.
//   - sluice_tenant_config_reloads_total: reloads of the tenant config file
//     (SIGHUP or a change to it) by result: ok (swapped in) or refused (the
//     file did not parse or validate; the previous config stays). Alarm on
//     refused > 0; `sluicectl limits <tenant>` shows which version is in use.
//   - sluice_drain_utilization_ratio, sluice_drain_fairness_index,
//     sluice_drain_held_jobs, sluice_drain_top_tenant_share,
//     sluice_drain_tenant_share: the drainers' fairness over the last tens
//     of seconds (package scheduler): busy slots ÷ slots while the lane's
//     jobs waited; Jain's index over the active tenants' worker-time shares
//     against their weighted max-min fair shares; jobs read ahead and
//     waiting; the largest tenant's share, and each top tenant's share with
//     its state (in_share, over_rate, capped, sidelined). The per-tenant
//     gauge is never published to CloudWatch (its values add up to 1).
//   - sluice_pull_workers, sluice_pull_credits_granted,
//     sluice_pull_credits_used, sluice_pull_leases_released_total: pull
//     workers (package pull) connected to this process per lane, the
//     credits they grant (a worker that stopped reading or let a lease time
//     out counts only what it holds), the jobs they hold, and the jobs
//     handed back at once because a worker's stream ended. Jobs waiting
//     with no credits granted means no worker serves the lane.
//
// Histogram buckets: enqueue latency 0.5 ms to 10 s; dwell and age of first
// attempt 10 ms to 1 day.
//
// # Bounded labels
//
// Every label has a bounded set of values. outcome and action take the
// values above ("other" for anything else); reason keeps only the code
// before a colon, so "permanent_failure: worker said …" counts as
// permanent_failure. lane, tier, queue, kind, reason and operation come from
// configuration and code; each keeps at most a fixed number of distinct
// values (64 lanes, 64 tiers, 4096 queues, 16 kinds, 64 reasons, 64
// operations, each at most 128 bytes) and records later new values as
// "other".
//
// The tenant label carries at most Options.TopTenants (K, default 20)
// tenant ids, plus "other" for everyone else, whatever the number of
// tenants. The K tenants are the heaviest by recent volume, found
// approximately in bounded memory: the K labeled tenants are counted
// exactly, and a Space-Saving summary of max(8K, 64) candidates tracks the
// rest (a tenant with more than 1/max(8K, 64) of the traffic cannot be
// missed). Every Options.TenantRefresh (default 1 minute) the K tenants
// with the most guaranteed volume become the labeled set and all volumes
// halve, so the set follows recent traffic. A tenant that leaves the set
// has its series deleted (later jobs count as "other"); increments made
// since the last scrape of that series are then not seen, a small loss,
// since a tenant leaves only when others out-submit it. While fewer than K
// tenants have been seen, each is labeled from its first job, so a
// deployment with at most K tenants sees every tenant exactly. A tenant
// named "other" is always counted as "other".
//
// # Use
//
// A nil *Metrics records nothing, so code and tests that do not care pass
// nil. Create one Metrics per registry (New panics on a second
// registration, like prometheus.MustRegister) and share it between the
// gateway and in-process drainers.
package metrics
