package client_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/internal/proccpu"
)

// BenchmarkProducer: 256 goroutines each sending one job at a time
// through one Producer, and SubmitBatch calls of 100 jobs from 16
// goroutines, each against its own real gateway (embedded backend, fsync
// per commit); one op is one job, and cpu-ns/op is the process's CPU per
// job (client and gateway together):
//
//	go test -run '^$' -bench Producer -benchmem -cpu 2 ./client/
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
	b.Run("SubmitBatch", func(b *testing.B) {
		c := benchClient(b)
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
	})
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
