package admin

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestPageTokenKeepsItsFilter: a page token is an offset among the jobs
// its listing's filter matched. Sent with another filter (sluicectl dlq
// list --page T without the --tenant it came from) it skipped that many
// jobs of the other listing without a word. It must be refused, naming
// page_token; with the same filter (a relative time may have moved) it
// pages as before.
func TestPageTokenKeepsItsFilter(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	base := time.Now().Add(-time.Hour)
	deadLetters(t, tb, base, 5, "a", "b")
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	onlyA := &adminv1.DLQFilter{Tenants: []string{"a"}, EnqueuedAfter: timestamppb.New(base.Add(-time.Minute))}
	first, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{Filter: onlyA, PageSize: 3})
	if err != nil || first.GetNextPageToken() == "" {
		t.Fatalf("first page: %v, %v", first, err)
	}
	token := first.GetNextPageToken()
	for _, tc := range []struct {
		name   string
		filter *adminv1.DLQFilter
	}{
		{"no filter", nil},
		{"another tenant", &adminv1.DLQFilter{Tenants: []string{"b"}}},
		{"a reason added", &adminv1.DLQFilter{Tenants: []string{"a"}, ReasonPrefix: "attempts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{Filter: tc.filter, PageSize: 3, PageToken: token})
			if st := status.Convert(err); st.Code() != codes.InvalidArgument {
				t.Fatalf("token of a tenant-a listing with filter %v: %d jobs, %v; want INVALID_ARGUMENT on page_token", tc.filter, len(resp.GetJobs()), err)
			}
		})
	}
	// The same filter, its time a little later (as "--since 2h" gives).
	same := &adminv1.DLQFilter{Tenants: []string{"a"}, EnqueuedAfter: timestamppb.New(base.Add(-time.Minute + time.Second))}
	second, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{Filter: same, PageSize: 3, PageToken: token})
	if err != nil || len(second.GetJobs()) != 2 || second.GetNextPageToken() != "" {
		t.Fatalf("second page of the same listing: %v, %v; want the other 2 of a's jobs", second, err)
	}
}
