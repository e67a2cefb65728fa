package client_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/sluice-dev/sluice/client"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/proccpu"
)

// BenchmarkProducer: 256 goroutines each sending one job at a time
// through one Producer (producer: each waits for its job's answer;
// pipelined: each waits only once 32 of its jobs are unanswered, the
// oldest first), and SubmitBatch calls of 100 jobs from 16
// goroutines, each against its own real gateway (embedded backend, fsync
// per commit); one op is one job, and cpu-ns/op is the process's CPU per
// job (client and gateway together). Give a fixed count: the gateway has
// no drainers, and past the lane's high-water mark (300,000 jobs) jobs
// are refused for backlog and the producer retries them until the
// backlog drains, which it never does:
//
//	go test -run '^$' -bench 'Producer$' -benchmem -cpu 2 -benchtime 100000x ./client/
func BenchmarkProducer(b *testing.B) {
	payload := make([]byte, 200)
	b.Run("producer", func(b *testing.B) {
		c := benchClient(b)
		p, err := c.NewProducer(client.ProducerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetParallelism(128)
		cpu := proccpu.Used()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				f, err := p.Send(context.Background(), client.Job{Payload: payload})
				if err == nil {
					_, err = f.Wait(context.Background())
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		if err := p.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("pipelined", func(b *testing.B) { benchPipelined(b, benchClient(b), payload) })
	b.Run("SubmitBatch", func(b *testing.B) { benchSubmitBatch(b, benchClient(b), payload) })
}

// benchClient starts a gateway of its own for b (a benchmark fills its
// queues) and returns a client of the unlimited tenant.
func benchClient(b *testing.B) *client.Client {
	b.Helper()
	addr, stop, err := startGateway()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	c, err := client.New(addr, client.Config{APIKey: "open-key", Insecure: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkProducerClientCPU: the client's own CPU per job, against a
// stub server that accepts every job at once (it stores nothing): the
// pipelined producer, and SubmitBatch calls of 100 jobs from 16
// goroutines.
//
//	go test -run '^$' -bench ProducerClientCPU -benchmem -cpu 2 ./client/
func BenchmarkProducerClientCPU(b *testing.B) {
	payload := make([]byte, 200)
	b.Run("pipelined", func(b *testing.B) { benchPipelined(b, stubClient(b), payload) })
	b.Run("SubmitBatch", func(b *testing.B) { benchSubmitBatch(b, stubClient(b), payload) })
}

// benchPipelined: 256 goroutines (at -cpu 2) sending through one producer
// of c, each keeping up to 32 jobs unanswered and waiting for the oldest,
// as the frontdoor bench's pipelined run.
func benchPipelined(b *testing.B, c *client.Client, payload []byte) {
	p, err := c.NewProducer(client.ProducerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(128)
	cpu := proccpu.Used()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]*client.Future, 0, 32)
		wait := func(f *client.Future) bool {
			if _, err := f.Wait(context.Background()); err != nil {
				b.Error(err)
				return false
			}
			return true
		}
		for pb.Next() {
			f, err := p.Send(context.Background(), client.Job{Payload: payload})
			if err != nil {
				b.Error(err)
				return
			}
			out = append(out, f)
			if len(out) == cap(out) {
				if !wait(out[0]) {
					return
				}
				out = append(out[:0], out[1:]...)
			}
		}
		for _, f := range out {
			if !wait(f) {
				return
			}
		}
	})
	b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if err := p.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// benchSubmitBatch: SubmitBatch calls of 100 jobs from 16 goroutines (at
// -cpu 2) on c.
func benchSubmitBatch(b *testing.B, c *client.Client, payload []byte) {
	b.ReportAllocs()
	b.SetParallelism(8)
	cpu := proccpu.Used()
	b.RunParallel(func(pb *testing.PB) {
		jobs := make([]client.Job, 0, 100)
		for {
			jobs = jobs[:0]
			for len(jobs) < 100 && pb.Next() {
				jobs = append(jobs, client.Job{Payload: payload})
			}
			if len(jobs) == 0 {
				return
			}
			if _, err := c.SubmitBatch(context.Background(), jobs); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(proccpu.Used()-cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// acceptAll is a stub server that accepts every job of a SubmitBatch.
type acceptAll struct {
	ingestv1.UnimplementedIngestServiceServer
}

func (acceptAll) SubmitBatch(_ context.Context, req *ingestv1.SubmitBatchRequest) (*ingestv1.SubmitBatchResponse, error) {
	rs := make([]ingestv1.SubmitBatchResult, len(req.GetJobs()))
	resp := &ingestv1.SubmitBatchResponse{Results: make([]*ingestv1.SubmitBatchResult, len(rs))}
	for i := range rs {
		rs[i].JobId = "j1"
		resp.Results[i] = &rs[i]
	}
	return resp, nil
}

// stubClient serves acceptAll on a loopback port for b and returns a
// client of it.
func stubClient(b *testing.B) *client.Client {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	ingestv1.RegisterIngestServiceServer(srv, acceptAll{})
	done := make(chan struct{})
	go func() { _ = srv.Serve(lis); close(done) }()
	b.Cleanup(func() { srv.Stop(); <-done })
	c, err := client.New(lis.Addr().String(), client.Config{APIKey: "k", Insecure: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}
