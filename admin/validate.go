package admin

import (
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/tenant"
)

// Admin request limits. An operator's filter is checked as strictly as a
// tenant's job: a typo must fail loudly, not match nothing or everything.
const (
	// MaxFilterTenants bounds the tenants one DLQ filter names.
	MaxFilterTenants = 1000
	// MaxFilterLanes bounds the lanes one DLQ filter names.
	MaxFilterLanes = 100
	// MaxReasonPrefixBytes bounds a filter's reason prefix.
	MaxReasonPrefixBytes = 256
	// MaxRequestBytes bounds one admin request message: the largest
	// filter is well under it.
	MaxRequestBytes = 1 << 20
)

// filterViolations checks a DLQ filter for ListDLQ and ReplayDLQ: tenant
// ids well-formed and not repeated, tenants and all_tenants not both set,
// valid timestamps in order, bounded lists. Lanes are checked against the
// topology by dlqQueues.
func filterViolations(f *adminv1.DLQFilter) []*errdetails.BadRequest_FieldViolation {
	var bad []*errdetails.BadRequest_FieldViolation
	ts := f.GetTenants()
	if len(ts) > MaxFilterTenants {
		bad = append(bad, violation("filter.tenants", "names %d tenants, over the limit of %d: use all_tenants or several replays", len(ts), MaxFilterTenants))
	} else {
		seen := make(map[string]bool, len(ts))
		for i, id := range ts {
			switch {
			case !tenant.ValidID(id):
				bad = append(bad, violation(fmt.Sprintf("filter.tenants[%d]", i), "%q is not a tenant id (1-64 letters, digits, '.', '_' or '-')", truncate(id, 70)))
			case seen[id]:
				bad = append(bad, violation(fmt.Sprintf("filter.tenants[%d]", i), "%q is named twice", id))
			}
			seen[id] = true
		}
	}
	if len(ts) > 0 && f.GetAllTenants() {
		bad = append(bad, violation("filter.all_tenants", "give tenants or all_tenants, not both"))
	}
	if n := len(f.GetLanes()); n > MaxFilterLanes {
		bad = append(bad, violation("filter.lanes", "names %d lanes, over the limit of %d", n, MaxFilterLanes))
	}
	switch p := f.GetReasonPrefix(); {
	case len(p) > MaxReasonPrefixBytes:
		bad = append(bad, violation("filter.reason_prefix", "is %d bytes, over the limit of %d", len(p), MaxReasonPrefixBytes))
	case !knownReasonPrefix(p):
		// It would match nothing, silently (found in review).
		bad = append(bad, violation("filter.reason_prefix", "%q starts no dead-letter reason: the reasons are %s (a prefix of one, or one followed by \": \" and its detail)",
			truncate(p, 70), strings.Join(deadLetterReasons, ", ")))
	}
	after, before := f.GetEnqueuedAfter(), f.GetEnqueuedBefore()
	okAfter := checkTime(&bad, "filter.enqueued_after", after)
	okBefore := checkTime(&bad, "filter.enqueued_before", before)
	if okAfter && okBefore && after != nil && before != nil && !after.AsTime().Before(before.AsTime()) {
		bad = append(bad, violation("filter.enqueued_after", "must be before enqueued_before"))
	}
	return bad
}

// replayViolations checks a ReplayDLQ request apart from its lanes (which
// dlqQueues checks against the topology). A replay must name its tenants
// or say all_tenants: an empty tenant list is a mistake, not a wildcard.
func replayViolations(req *adminv1.ReplayDLQRequest) []*errdetails.BadRequest_FieldViolation {
	var bad []*errdetails.BadRequest_FieldViolation
	f := req.GetFilter()
	if len(f.GetTenants()) == 0 && !f.GetAllTenants() {
		bad = append(bad, violation("filter.tenants", "name the tenants to replay, or set all_tenants to replay every tenant's jobs"))
	}
	bad = append(bad, filterViolations(f)...)
	if r := req.GetRatePerSecond(); !(r >= 0 && r <= ReplayRateMax) { // NaN too
		bad = append(bad, violation("rate_per_second", "must be 0 (default %g) to %g", ReplayRateDefault, ReplayRateMax))
	}
	if req.GetMaxJobs() < 0 {
		bad = append(bad, violation("max_jobs", "must not be negative"))
	}
	return bad
}

// checkTime records a violation for an invalid timestamp and reports
// whether ts is usable (nil counts).
func checkTime(bad *[]*errdetails.BadRequest_FieldViolation, field string, ts *timestamppb.Timestamp) bool {
	if ts == nil {
		return true
	}
	if err := ts.CheckValid(); err != nil {
		*bad = append(*bad, violation(field, "is not a valid time: %v", err))
		return false
	}
	return true
}

// truncate shortens s for echoing in an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
