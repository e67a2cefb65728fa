package reliability

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// LoadConfig describes a load: how many callers, how fast, with which
// keys and job kinds.
type LoadConfig struct {
	Addr string
	// Keys are the tenants' API keys; each call picks one at random.
	Keys []string
	// Callers is the number of goroutines calling at once.
	Callers int
	// Conns is the number of client connections the callers share.
	// Defaults to 1.
	Conns int
	// Rate is the jobs per second offered in all (a token bucket paces the
	// callers); 0 is as fast as the callers go.
	Rate float64
	// BatchShare is the share of calls that are SubmitBatch of 2 to 10
	// jobs; the rest are Submit.
	BatchShare float64
	// Mix of job kinds.
	Mix Mix
	// PayloadSize pads payloads to this many bytes.
	PayloadSize int
	// CallTimeout is each call's deadline. It is longer than the gateway's
	// slowest honest answer (the SQS backend's 10 s call timeout), so a
	// DEADLINE_EXCEEDED means the gateway stopped answering.
	CallTimeout time.Duration
	// KeepLatency keeps every call's latency for percentiles.
	KeepLatency bool
	// WaitForReady makes calls wait for a gateway that is restarting
	// instead of failing at once.
	WaitForReady bool
}

// LoadStats counts what the gateway answered, per job.
type LoadStats struct {
	Calls int64 `json:"calls"`
	Jobs  int64 `json:"jobs"`
	// Codes counts answers per job by gRPC code name.
	Codes map[string]int64 `json:"codes"`
	// NoRetryInfo counts RESOURCE_EXHAUSTED answers without a RetryInfo.
	NoRetryInfo int64 `json:"no_retry_info"`
	// Latencies are the calls' durations, when kept.
	Latencies []time.Duration `json:"-"`
}

// Count returns the number of jobs answered with code.
func (s LoadStats) Count(c codes.Code) int64 { return s.Codes[c.String()] }

// Percentile returns the p-th percentile (0–100) of the kept latencies.
func (s *LoadStats) Percentile(p float64) time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	l := slices.Clone(s.Latencies)
	slices.Sort(l)
	i := min(len(l)-1, int(float64(len(l))*p/100))
	return l[i]
}

// Load drives a gateway until its context ends, recording each job in a
// ledger.
type Load struct {
	cfg    LoadConfig
	ledger *Ledger
	conns  []*grpc.ClientConn

	mu    sync.Mutex
	stats LoadStats
}

// NewLoad dials the gateway (connections are lazy; a gateway that is down
// or restarting is retried by gRPC).
func NewLoad(cfg LoadConfig, ledger *Ledger) (*Load, error) {
	l := &Load{cfg: cfg, ledger: ledger, stats: LoadStats{Codes: map[string]int64{}}}
	for range max(1, cfg.Conns) {
		conn, err := testcluster.Dial(cfg.Addr, grpc.WithDefaultCallOptions(grpc.WaitForReady(cfg.WaitForReady)))
		if err != nil {
			l.Close()
			return nil, err
		}
		l.conns = append(l.conns, conn)
	}
	return l, nil
}

// Close closes the connections.
func (l *Load) Close() {
	for _, c := range l.conns {
		_ = c.Close()
	}
}

// Stats returns a copy of the counts so far.
func (l *Load) Stats() LoadStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Codes = maps.Clone(l.stats.Codes)
	s.Latencies = slices.Clone(l.stats.Latencies)
	return s
}

// Start runs the load in the background until stop is called; stop
// waits for the callers to return.
func (l *Load) Start(ctx context.Context) (stop func()) { return testcluster.Background(ctx, l.Run) }

// Run calls until ctx ends and returns when every caller has finished
// its last call (each call is bounded by CallTimeout).
func (l *Load) Run(ctx context.Context) {
	var lim *rate.Limiter
	if l.cfg.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(l.cfg.Rate), max(10, int(l.cfg.Rate/20))) // a burst holds the largest batch
	}
	var wg sync.WaitGroup
	for i := range max(1, l.cfg.Callers) {
		client := ingestv1.NewIngestServiceClient(l.conns[i%len(l.conns)])
		wg.Go(func() {
			for ctx.Err() == nil {
				n := 1
				if rand.Float64() < l.cfg.BatchShare {
					n = 2 + rand.N(9)
				}
				if lim != nil && lim.WaitN(ctx, n) != nil {
					return
				}
				l.call(client, n)
			}
		})
	}
	wg.Wait()
}

// call makes one Submit (n == 1) or SubmitBatch call. Its context is not
// the load's: a call under way when the load stops still gets its answer,
// so the ledger learns its outcome.
func (l *Load) call(client ingestv1.IngestServiceClient, n int) {
	key := l.cfg.Keys[rand.N(len(l.cfg.Keys))]
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.CallTimeout)
	defer cancel()
	ctx = testcluster.WithKey(ctx, key)
	seqs := make([]int64, n)
	reqs := make([]*ingestv1.SubmitRequest, n)
	for i := range n {
		var p []byte
		seqs[i], p = l.ledger.Next(l.cfg.Mix, l.cfg.PayloadSize)
		reqs[i] = &ingestv1.SubmitRequest{Payload: p}
	}
	start := time.Now()
	type answer struct {
		code  codes.Code
		retry bool
	}
	answers := make([]answer, n)
	if n == 1 {
		resp, err := client.Submit(ctx, reqs[0])
		if err == nil {
			l.ledger.Ack(seqs[0], resp.GetJobId())
		} else {
			st := status.Convert(err)
			answers[0] = answer{st.Code(), hasRetryInfo(st)}
			l.ledger.Fail(seqs[0], st.Code())
		}
	} else {
		resp, err := client.SubmitBatch(ctx, &ingestv1.SubmitBatchRequest{Jobs: reqs})
		switch {
		case err != nil:
			st := status.Convert(err)
			for i := range n {
				answers[i] = answer{st.Code(), hasRetryInfo(st)}
				l.ledger.Fail(seqs[i], st.Code())
			}
		case len(resp.GetResults()) != n:
			for i := range n {
				answers[i] = answer{code: codes.Internal}
				l.ledger.Fail(seqs[i], codes.Internal)
			}
		default:
			for i, r := range resp.GetResults() {
				if je := r.GetError(); je != nil {
					c := codes.Code(je.GetCode())
					answers[i] = answer{c, je.GetRetryDelay() != nil}
					l.ledger.Fail(seqs[i], c)
					continue
				}
				l.ledger.Ack(seqs[i], r.GetJobId())
			}
		}
	}
	took := time.Since(start)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stats.Calls++
	l.stats.Jobs += int64(n)
	for _, a := range answers {
		l.stats.Codes[a.code.String()]++
		if a.code == codes.ResourceExhausted && !a.retry {
			l.stats.NoRetryInfo++
		}
	}
	if l.cfg.KeepLatency {
		l.stats.Latencies = append(l.stats.Latencies, took)
	}
}

func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

// Probe submits one job (kind ok, of size bytes) with key through a
// connection of its own, records it in the ledger and returns the call's
// error; used to probe a gateway.
func (l *Ledger) Probe(ctx context.Context, addr, key string, size int, timeout time.Duration) error {
	seq, payload := l.Next(Mix{}, size)
	ctx, cancel := context.WithTimeout(testcluster.WithKey(ctx, key), timeout)
	defer cancel()
	conn, err := testcluster.Dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := ingestv1.NewIngestServiceClient(conn).Submit(ctx, &ingestv1.SubmitRequest{Payload: payload})
	if err == nil && resp.GetJobId() == "" {
		err = errors.New("OK without a job id")
	}
	if err != nil {
		l.Fail(seq, status.Code(err))
		return err
	}
	l.Ack(seq, resp.GetJobId())
	return nil
}
