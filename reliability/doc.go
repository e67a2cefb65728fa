// Package reliability tries hard to break sluice's contract, that a job
// answered OK is delivered at least once or sits in a dead-letter queue,
// with real processes, real sockets and real files:
//
//   - crash accounting (RunCrash): the gateway and drainers under load,
//     killed with SIGKILL at random moments and restarted, on the embedded
//     backend and on the SQS-compatible server;
//   - backend faults (RunFaults): an HTTP/TCP fault proxy (FaultProxy)
//     between the binaries and the SQS-compatible server adding latency,
//     connection resets, hangs, 5xx, throttling and partial batch failures;
//   - storage faults (RunDisk): the embedded backend on a small tmpfs that
//     is read-only at start, then fills up under load;
//   - overload (RunOverload): ten times the configured admission capacity
//     from many tenants;
//   - fuzzing (ListFuzzTargets, RunFuzz): every Go fuzz target for a fixed
//     time.
//
// A Ledger records every job the load client submitted and the answer it
// got, and is checked at the end against the deliveries a real gRPC worker
// (Worker) acknowledged and the jobs found in the dead-letter queues.
//
// The tests of this package run each scenario briefly (they are part of
// `make test`); reliability/cmd/sluice-reliability runs them at length and
// writes docs/reliability.md (`make reliability`).
package reliability
