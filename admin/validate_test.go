package admin

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestReplayFilterMistakes sends the replay requests an operator could get
// wrong: each is refused with INVALID_ARGUMENT naming the field, before
// anything is scanned, so no mistake reaches another tenant's jobs.
func TestReplayFilterMistakes(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	now := time.Now()
	many := make([]string, MaxFilterTenants+1)
	for i := range many {
		many[i] = "t" + strings.Repeat("x", i%50) + string(rune('a'+i%26))
	}
	tests := []struct {
		name  string
		req   *adminv1.ReplayDLQRequest
		field string // empty: accepted
	}{
		{"no filter", &adminv1.ReplayDLQRequest{}, "filter.tenants"},
		{"empty filter", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{}}, "filter.tenants"},
		{"only a lane", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Lanes: []string{"std"}}}, "filter.tenants"},
		{"only a reason", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{ReasonPrefix: "attempts"}}, "filter.tenants"},
		{"empty tenant id", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{""}}}, "filter.tenants[0]"},
		{"tenant list in one entry", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"acme", "acme,beta"}}}, "filter.tenants[1]"},
		{"tenant with a space", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"acme "}}}, "filter.tenants[0]"},
		{"tenant wildcard", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"*"}}}, "filter.tenants[0]"},
		{"tenant twice", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"acme", "acme"}}}, "filter.tenants[1]"},
		{"too many tenants", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: many}}, "filter.tenants"},
		{"tenants and all_tenants", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"acme"}, AllTenants: true}}, "filter.all_tenants"},
		{"unknown lane", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true, Lanes: []string{"gold"}}}, "filter.lanes"},
		{"invalid time", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true, EnqueuedAfter: &timestamppb.Timestamp{Nanos: -1}}}, "filter.enqueued_after"},
		{"inverted times", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true, EnqueuedAfter: timestamppb.New(now), EnqueuedBefore: timestamppb.New(now)}}, "filter.enqueued_after"},
		{"long reason", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true, ReasonPrefix: strings.Repeat("r", MaxReasonPrefixBytes+1)}}, "filter.reason_prefix"},
		{"NaN rate", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: math.NaN()}, "rate_per_second"},
		{"infinite rate", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: math.Inf(1)}, "rate_per_second"},
		{"negative rate", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, RatePerSecond: -1}, "rate_per_second"},
		{"negative max", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true}, MaxJobs: -1}, "max_jobs"},
		{"named tenants", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"acme", "beta.eu-1"}}, DryRun: true}, ""},
		{"explicit all tenants", &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true, Lanes: []string{"std"}}, DryRun: true, RatePerSecond: ReplayRateMax}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.ReplayDLQ(t.Context(), tt.req)
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantViolation(t, err, tt.field)
		})
	}
}

func TestListFilterMistakes(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	tests := []struct {
		name  string
		req   *adminv1.ListDLQRequest
		field string
	}{
		{"bad tenant", &adminv1.ListDLQRequest{Filter: &adminv1.DLQFilter{Tenants: []string{"a b"}}}, "filter.tenants[0]"},
		{"invalid time", &adminv1.ListDLQRequest{Filter: &adminv1.DLQFilter{EnqueuedBefore: &timestamppb.Timestamp{Seconds: math.MaxInt64}}}, "filter.enqueued_before"},
		{"page token of another kind", &adminv1.ListDLQRequest{PageToken: "b-1"}, "page_token"},
		{"negative preview", &adminv1.ListDLQRequest{PreviewBytes: -1}, "preview_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.ListDLQ(t.Context(), tt.req)
			wantViolation(t, err, tt.field)
		})
	}
}

func wantViolation(t *testing.T, err error, field string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("code %v (%v), want INVALID_ARGUMENT", st.Code(), err)
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				if v.GetField() == field && v.GetDescription() != "" {
					return
				}
				fields = append(fields, v.GetField())
			}
		}
	}
	t.Fatalf("violations on %v, want one on %s", fields, field)
}

// TestUnknownLaneNamesTheLanes: a lane the topology does not have is
// refused naming the lanes it has. "filter.lanes unknown lane \"gold\""
// left the operator to find them (found in a walkthrough), where a pull
// worker's unknown lane is told "it drains [premium standard free]".
func TestUnknownLaneNamesTheLanes(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, `
lanes:
  - {name: premium, shards: 1, staleness_bound: 1m}
  - {name: standard, shards: 1, staleness_bound: 1m}
  - {name: free, shards: 1, staleness_bound: 1m}
`)
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	const lanes = "(the lanes are premium, standard, free)"
	tests := []struct {
		name, field, want string
		call              func() error
	}{
		{"list", "filter.lanes", `unknown lane "gold" ` + lanes, func() error {
			_, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{Filter: &adminv1.DLQFilter{Lanes: []string{"gold"}}})
			return err
		}},
		{"list, a known lane first", "filter.lanes", `unknown lane "Free" ` + lanes, func() error {
			_, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{Filter: &adminv1.DLQFilter{Lanes: []string{"premium", "Free"}}})
			return err
		}},
		{"replay", "filter.lanes", `unknown lane "gold" ` + lanes, func() error {
			_, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{AllTenants: true, Lanes: []string{"gold"}}, DryRun: true})
			return err
		}},
		{"redrive", "lane", `unknown lane "gold" ` + lanes, func() error {
			_, err := a.RedriveDLQ(t.Context(), &adminv1.RedriveDLQRequest{Lane: "gold"})
			return err
		}},
		{"redrive, no lane", "lane", `unknown lane "" ` + lanes, func() error {
			_, err := a.RedriveDLQ(t.Context(), &adminv1.RedriveDLQRequest{})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantViolation(t, err, tt.field)
			if !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Errorf("%v, want it to say %q", err, tt.want)
			}
		})
	}
}
