package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// bareIngest answers the ingest API's messages with nothing behind them:
// no auth, no limits, no queue. It is what a gRPC server costs on this
// machine, the front door's yardstick.
type bareIngest struct {
	ingestv1.UnimplementedIngestServiceServer
}

func (bareIngest) Submit(context.Context, *ingestv1.SubmitRequest) (*ingestv1.SubmitResponse, error) {
	return &ingestv1.SubmitResponse{JobId: ulid.Make().String()}, nil
}

func (bareIngest) SubmitBatch(_ context.Context, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
	rs := make([]*ingestv1.SubmitBatchResult, len(req.GetJobs()))
	for i := range rs {
		rs[i] = &ingestv1.SubmitBatchResult{JobId: ulid.Make().String()}
	}
	return &ingestv1.SubmitBatchResponse{Results: rs}, nil
}

// ServeBare serves the bare ingest server on listen until ctx ends,
// logging its address as the sluice binaries do (a JSON line with msg
// "bare server listening" on logw).
func ServeBare(ctx context.Context, listen string, logw io.Writer) error {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("bare server: %w", err)
	}
	srv := grpc.NewServer()
	ingestv1.RegisterIngestServiceServer(srv, bareIngest{})
	line, _ := json.Marshal(map[string]string{"msg": "bare server listening", "addr": lis.Addr().String()})
	fmt.Fprintf(logw, "%s\n", line)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(lis)
}
