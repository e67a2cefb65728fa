package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/worker"
)

// TestUnservedServiceNamesTheRightListener: a pull worker pointed at the
// ingest listener (with its worker key) was told "unknown API key", and an
// admin client "unknown API key" about its admin key: the key was checked
// before gRPC found that the listener serves no such service, which sent
// the user after the wrong fix. Such calls get UNIMPLEMENTED naming the
// listener to use, whatever key they carry, as the admin listener answers
// a worker already.
func TestUnservedServiceNamesTheRightListener(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	for _, k := range []string{"", "sk_worker_not_an_api_key", "acme-key-1"} {
		ctx := t.Context()
		if k != "" {
			ctx = key(ctx, k)
		}
		stream, err := workerv1.NewPullServiceClient(tb.conn).Connect(ctx)
		if err == nil {
			_, err = stream.Recv()
		}
		if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "--worker-listen") {
			t.Errorf("PullService.Connect with key %q: %v, want UNIMPLEMENTED naming --worker-listen", k, err)
		}
		_, err = adminv1.NewAdminServiceClient(tb.conn).GetQueueStats(ctx, &adminv1.GetQueueStatsRequest{})
		if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "--admin-listen") {
			t.Errorf("AdminService.GetQueueStats with key %q: %v, want UNIMPLEMENTED naming --admin-listen", k, err)
		}
	}

	// The worker stops at once, saying where to connect, as it does at
	// the admin listener.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := worker.Connect(ctx, tb.conn.Target(), "sk_worker_not_an_api_key", func(context.Context, worker.Job) error { return nil }, worker.ConnectOptions{Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, worker.ErrRefused) || !strings.Contains(err.Error(), "does not serve the worker API") ||
		!strings.Contains(err.Error(), "ingest listener") || strings.Contains(err.Error(), "API key") {
		t.Errorf("worker.Connect to the ingest listener: %v, want ErrRefused saying it does not serve the worker API, not about the key", err)
	}
}
