package admin

import (
	"testing"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestListPagesFitAClient: 500 dead letters at the gateway's limits (a
// 4 KiB payload, 16 attributes of 1 KiB) made a page of 500 with 4 KiB
// previews about 10 MB, which gRPC clients refuse by default (4 MiB):
// sluicectl dlq show and the console's job and Tenants pages failed with
// RESOURCE_EXHAUSTED. A page stops short of that, and paging still
// visits every job once.
func TestListPagesFitAClient(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	tb.Enqueue(t, tb.Topo.DLQ("std"), topotest.BulkyEnvelopes("a", 500)...)
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)

	pageThrough(t, a, &adminv1.ListDLQRequest{PageSize: 500, PreviewBytes: 4096}, 500, 10, func(resp *adminv1.ListDLQResponse) {
		if n := proto.Size(resp); n > 4<<20 {
			t.Fatalf("a page of %d jobs is %d bytes, over the 4 MiB a gRPC client takes by default", len(resp.GetJobs()), n)
		}
	})
}
