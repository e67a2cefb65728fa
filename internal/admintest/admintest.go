// Package admintest serves the real admin API on a loopback port for the
// tests of its clients (the console, sluicectl).
package admintest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/admin"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/topology"
)

// Serve starts the admin API over b and topo, taking key, on 127.0.0.1
// and returns its address; it stops when the test ends.
func Serve(t testing.TB, b queue.Backend, topo topology.Topology, key string) string {
	t.Helper()
	return ServeServer(t, admin.NewServer(b, topo, topotest.QuietLog), key)
}

// ServeServer is Serve for an admin server the test has set up (its
// fairness report, say).
func ServeServer(t testing.TB, a *admin.Server, key string) string {
	t.Helper()
	unary, stream := admin.Auth(key)
	srv := grpc.NewServer(grpc.UnaryInterceptor(unary), grpc.StreamInterceptor(stream))
	adminv1.RegisterAdminServiceServer(srv, a)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	})
	return lis.Addr().String()
}

// MoveTasks gives a backend (the embedded store) SQS-like whole-DLQ move
// tasks: StartRedrive answers "handle-1", ListRedrives lists Tasks, and
// CancelRedrive stops "handle-1" after 7 moved, any other handle being
// ErrTaskNotFound.
type MoveTasks struct {
	queue.Backend
	Tasks []queue.RedriveTask
}

// StartRedrive answers the task handle-1.
func (m *MoveTasks) StartRedrive(context.Context, string, int) (string, error) {
	return "handle-1", nil
}

// ListRedrives lists m.Tasks.
func (m *MoveTasks) ListRedrives(context.Context, string) ([]queue.RedriveTask, error) {
	return m.Tasks, nil
}

// CancelRedrive stops handle-1, which had moved 7.
func (m *MoveTasks) CancelRedrive(_ context.Context, task string) (int64, error) {
	if task != "handle-1" {
		return 0, fmt.Errorf("sqs cancel message move task: %w: ResourceNotFoundException: Task does not exist", queue.ErrTaskNotFound)
	}
	return 7, nil
}
