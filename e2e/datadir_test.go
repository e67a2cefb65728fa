package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// TestDataDirRemovedWhileRunning: the real gateway whose data directory
// is removed under it (rm -rf) says so, refuses new jobs saying why, and
// at SIGTERM writes its store back, so that the restarted gateway has
// every job it acknowledged. It answered OK to every job and started
// empty after the restart (found in a filesystem walkthrough: 5,883
// acknowledged jobs lost).
func TestDataDirRemovedWhileRunning(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, gatewayCluster("")) // no delivery: the jobs stay
	c := client(t, cl.Addr)
	ctx := withKey(t.Context(), "alpha-key-123")
	for i := range 5 {
		if _, err := c.Submit(ctx, &ingestv1.SubmitRequest{Payload: fmt.Appendf(nil, "kept-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(cl.DataDir); err != nil {
		t.Fatal(err)
	}
	gw := role(t, cl, "gateway")
	l := gw.waitLog("the store file was removed while sluice ran (was the data directory deleted or its volume changed?). " +
		"New jobs are refused; the jobs it holds are still delivered from the open file; stop this process normally (SIGTERM, not SIGKILL) and it writes them back")
	if n, _ := l["messages"].(float64); n != 5 {
		t.Errorf("the removal was logged with %v messages, want the 5 held", l["messages"])
	}
	_, err := c.Submit(ctx, &ingestv1.SubmitRequest{Payload: []byte("after the removal")})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "was removed while this process ran") {
		t.Fatalf("submit after the removal: %v, want UNAVAILABLE saying the store file was removed", err)
	}
	if err := cl.Proc("gateway").Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if cl.Proc("gateway").Find("wrote back the store whose file was removed: the next start finds its jobs (keys in the data directory that were removed with it are made anew)") == nil {
		t.Fatal("the stopping gateway did not log that it wrote the store back")
	}
	if err := cl.StartRole(t.Context(), "gateway"); err != nil {
		t.Fatal(err)
	}
	if n, _ := role(t, cl, "gateway").waitLog("embedded store open")["messages"].(float64); n != 5 {
		t.Fatalf("the restarted gateway opened a store of %v messages, want the 5 acknowledged before the removal", n)
	}
}
