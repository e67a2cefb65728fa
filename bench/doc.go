// Package bench is sluice's benchmark and scenario harness (`make bench`).
//
// It builds the real binaries (cmd/gateway, cmd/drainer, without -race),
// starts them on free 127.0.0.1 ports with data directories of their own,
// serves a real gRPC worker that records each delivery, drives load through
// the real ingest API, and measures what the issue-7 goals ask for:
//
//  1. front door: Submit/s and latency through the gateway next to a bare
//     grpc-go server answering the same messages, and SubmitBatch jobs/s;
//  2. fairness: quiet tenants' dwell with noisy neighbours, as a ratio of
//     a run without noise, next to a plain shared FIFO;
//  3. recovery: time until fresh jobs see baseline dwell after drainers
//     come back to a large backlog, next to the FIFO;
//  4. cost: SQS API calls per delivered job, counted at the client;
//  5. memory: limiter bytes per tenant and ns per decision (Go
//     benchmarks in gateway/) and the gateway's RSS with 100k tenants;
//  6. drain efficiency: drainer jobs/s to a no-op worker as a ratio of the
//     backend's raw receive+delete rate;
//  7. embedded backend enqueue and claim+ack jobs/s (Go benchmarks in
//     queue/embeddedqueue).
//
// Every figure that can be is a ratio of two things measured side by side
// in the same run, since the machines are shared and noisy. The FIFO
// baseline is the same binaries with --sideline=false and a topology of
// one shard per lane chosen by every tenant (no shuffle-sharding).
//
// Results are kept in docs/bench/results.json (one entry per figure, so a
// scenario run on its own updates only its own figures) and rendered into
// docs/benchmarks.md; plots are SVG files under docs/bench/, drawn by
// this package. The command is bench/cmd/sluice-bench.
package bench
