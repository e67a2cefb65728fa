package admin

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestListReplaysFitsAClient: 100 kept dry runs whose filters each name a
// thousand 64-byte tenants came to 6.6 MB in one ListReplays answer, past
// a gRPC client's 4 MiB limit. The answer stops before pageBytesMax,
// newest first, says it left replays out, and each one left out is still
// there by id.
func TestListReplaysFitsAClient(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	tenants := make([]string, 1000)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("%s-%06d", strings.Repeat("t", 57), i)
	}
	var ids []string
	for range 100 {
		resp, err := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{
			Filter: &adminv1.DLQFilter{Tenants: tenants}, DryRun: true, RatePerSecond: ReplayRateMax,
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.GetReplay().GetId())
	}
	list, err := a.ListReplays(t.Context(), &adminv1.ListReplaysRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := proto.Size(list); n > 4<<20 {
		t.Fatalf("ListReplays answer is %d bytes, over a client's 4 MiB", n)
	}
	got := list.GetReplays()
	if !list.GetTruncated() || len(got) == 0 || len(got) == len(ids) {
		t.Fatalf("ListReplays: %d of %d replays, truncated %v; want some left out, and truncated", len(got), len(ids), list.GetTruncated())
	}
	for i, r := range got {
		if want := ids[len(ids)-1-i]; r.GetId() != want {
			t.Fatalf("replay %d listed is %s, want %s (newest first)", i, r.GetId(), want)
		}
	}
	oldest := ids[0]
	if _, err := a.GetReplay(t.Context(), &adminv1.GetReplayRequest{ReplayId: oldest}); err != nil {
		t.Errorf("GetReplay of a replay left out of the list: %v", err)
	}
}
