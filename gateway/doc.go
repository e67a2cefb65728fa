// Package gateway is sluice's gRPC front door: it authenticates each call
// to a tenant, validates jobs, applies the tenant's token bucket and its
// lane's high-water mark, deduplicates by idempotency key, routes each job
// to the least deep of the tenant's shard queues, and answers OK only after
// the queue backend has durably stored it.
//
// The checks for one job run in this order; the first that fails decides
// the answer:
//
//  1. authenticate (interceptor): UNAUTHENTICATED for a missing or unknown key
//  2. validate: INVALID_ARGUMENT with google.rpc.BadRequest field violations
//  3. idempotency: a repeat of a key seen within the window answers the
//     first job's id with duplicate=true, costing no token
//  4. tenant token bucket: RESOURCE_EXHAUSTED with QuotaFailure and a
//     RetryInfo equal to the time until a token is available
//  5. lane high-water mark, graduated by tier: RESOURCE_EXHAUSTED with
//     QuotaFailure and a RetryInfo of the time the lane needs to drain back
//     under the tenant's threshold (the token is given back)
//  6. route and enqueue: UNAVAILABLE with a RetryInfo of 1s if the backend
//     did not store the job
package gateway
