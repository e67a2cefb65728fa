// Package cloudwatchpub publishes sluice's Prometheus registry to Amazon
// CloudWatch with PutMetricData, so CloudWatch alarms and dashboards see the
// same figures as /metrics. It is the only package that imports
// aws-sdk-go-v2/service/cloudwatch.
//
// Every Interval (default 1 minute) a cycle gathers the registry and
// converts each family whose name starts with "sluice_" (except the
// publisher's own sluice_cloudwatch_* counters):
//
//   - names: Name drops the "sluice_" prefix, the "_total" suffix of
//     counters and a unit suffix, and writes the rest in CamelCase:
//     sluice_jobs_submitted_total → JobsSubmitted,
//     sluice_age_of_first_attempt_seconds → AgeOfFirstAttempt (the metric
//     list is in package metrics).
//   - dimensions: only the labels lane, queue, kind, action, reason,
//     outcome, tier, operation and result, as Lane, Queue, Kind, Action,
//     Reason, Outcome, Tier, Operation and Result (TenantConfigReloads by
//     Result, so that refused reloads can be alarmed on). Every other
//     label, tenant above all, is dropped, and series that then coincide
//     are added up. An empty or blank label value becomes "none", so each
//     metric keeps one dimension set; a value CloudWatch would refuse (and
//     with it the whole call) has each non-ASCII or control character
//     replaced by '_' and is cut to 1024 characters (a tier is named
//     freely in the tenant file).
//   - counters become the increase since the previous cycle, unit Count
//     (the first cycle reports everything counted since the series
//     appeared; a counter that went down was reset, and a series with a
//     new created timestamp was deleted and made again, as package metrics
//     does when a tenant leaves the top K and comes back: either reports
//     its new value). Zero increases are sent too, so alarms see 0, not
//     missing data.
//   - gauges become their current value (unit Seconds for *_seconds, else
//     Count).
//   - histograms become a StatisticSet of the samples observed since the
//     previous cycle (unit Seconds): SampleCount and Sum are exact; Minimum
//     and Maximum are estimated from the buckets: the lower edge of the
//     first non-empty bucket and the upper edge of the last, tightened with
//     the sum (the largest sample cannot exceed the sum minus the lower
//     edges of the others), which is exact for one sample and bounds the
//     +Inf bucket; Minimum ≤ Sum/SampleCount ≤ Maximum always holds. An
//     interval without samples sends nothing for that histogram.
//
// Every datum of a cycle carries the cycle's timestamp and standard (60 s)
// resolution. Datums carry no host dimension, so every gateway and drainer
// publishes into the same metrics: read counters and histograms with the
// Sum and SampleCount statistics (they add up across processes) and the
// queue gauges, which each process reads from the same queues, with
// Maximum or Average, not Sum. The datums go out in PutMetricData calls of at most
// MaxDatumsPerRequest (1000, CloudWatch's limit) items and well under its
// 1 MB request limit.
//
// # Errors
//
// Nothing here crashes the process. A call is retried by the client's
// retryer (the SDK's standard retryer: 3 attempts with jittered backoff for
// throttling, 5xx and connection errors); if it still fails, that batch is
// dropped, counted (Stats, and sluice_cloudwatch_put_requests_total and
// sluice_cloudwatch_datums_total if a Registerer is given) and logged by the
// timer loop, and the next batch and the next cycle go on as usual. The
// dropped counter increases are not re-sent later: a failed call may have
// been stored anyway (a timeout after CloudWatch accepted it), and
// publishing at most once never double-counts.
//
// # Wire protocol
//
// The cloudwatch client (v1.75.5) speaks Smithy RPC v2 CBOR: POST
// /service/GraniteServiceVersion20100801/operation/PutMetricData with
// Content-Type application/cbor and Smithy-Protocol rpc-v2-cbor, the body
// gzip-compressed (Content-Encoding gzip) when it is at least the client's
// RequestMinCompressSizeBytes (10240 with config.LoadDefaultConfig; a
// zero-value cloudwatch.Options compresses every body). The tests decode
// these real requests with github.com/aws/smithy-go/encoding/cbor.
package cloudwatchpub
