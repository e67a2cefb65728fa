package reliability

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"google.golang.org/protobuf/proto"

	envelopev1 "github.com/sluice-dev/sluice/gen/sluice/envelope/v1"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/topology"
)

// Leftovers are the messages still in the live queues (shards,
// spillover, backlog) when everything has stopped: jobs the drainers had
// not yet finished with.
type Leftovers struct {
	Messages int64 `json:"messages"`
	// Jobs are the messages read from the live queues.
	Jobs []DeadLetter `json:"-"`
	// DLQInFlight counts dead letters hidden by an earlier receive when
	// the reading began (nothing should receive from a DLQ): they cannot
	// be read, so their jobs would look lost.
	DLQInFlight int64 `json:"dlq_in_flight"`
}

// ReadFinal reads, with every sluice process stopped, the jobs in the
// dead-letter queues and those left in the other queues (received with a
// long visibility timeout, so each copy is seen once).
func ReadFinal(ctx context.Context, b queue.Backend, topo topology.Topology) ([]DeadLetter, Leftovers, error) {
	var dead []DeadLetter
	var left Leftovers
	for _, q := range topo.Queues() {
		jobs, inFlight, err := readQueue(ctx, b, q.Spec.Name)
		if err != nil {
			return nil, left, err
		}
		if q.Kind == topology.KindDLQ {
			dead = append(dead, jobs...)
			left.DLQInFlight += inFlight
			continue
		}
		left.Jobs = append(left.Jobs, jobs...)
		left.Messages += int64(len(jobs)) + inFlight
	}
	return dead, left, nil
}

// readQueue receives every visible or delayed message of a queue and
// returns their jobs, and how many messages were hidden by an earlier
// receive (those cannot be read).
func readQueue(ctx context.Context, b queue.Backend, name string) ([]DeadLetter, int64, error) {
	before, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{name}})
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", name, err)
	}
	var jobs []DeadLetter
	deadline := time.Now().Add(2 * time.Minute)
	for empties := 0; ; {
		if empties >= 3 {
			// Empty receives alone do not prove the queue empty (a server
			// may answer a long poll early): its counts must agree.
			st, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{name}})
			if err != nil {
				return nil, 0, fmt.Errorf("read %s: %w", name, err)
			}
			if st[0].Visible+st[0].Delayed == 0 {
				return jobs, before[0].InFlight, nil
			}
			if time.Now().After(deadline) {
				return nil, 0, fmt.Errorf("read %s: %d messages still visible or delayed after 2 minutes of receives", name, st[0].Visible+st[0].Delayed)
			}
			empties = 0
		}
		msgs, err := b.Receive(ctx, &queue.ReceiveParams{Queue: name, Max: queue.MaxBatch, Wait: 200 * time.Millisecond, VisibilityTimeout: time.Hour})
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", name, err)
		}
		if len(msgs) == 0 {
			empties++
			continue
		}
		empties = 0
		for _, m := range msgs {
			var env envelopev1.Envelope
			if err := proto.Unmarshal(m.Body, &env); err != nil || env.GetJobId() == "" {
				jobs = append(jobs, DeadLetter{JobID: "malformed:" + m.MessageID, Payload: string(m.Body)})
				continue
			}
			jobs = append(jobs, DeadLetter{JobID: env.GetJobId(), Payload: string(env.GetPayload()), Reason: env.GetDeadLetterReason()})
		}
	}
}

// OpenEmbedded opens the embedded store of a data directory whose gateway
// has stopped.
func OpenEmbedded(dataDir string) (queue.Backend, error) {
	b, err := embeddedqueue.Open(filepath.Join(dataDir, "queues.db"), embeddedqueue.Options{Logger: quietLogger()})
	if err != nil {
		return nil, fmt.Errorf("open the embedded store: %w", err)
	}
	return b, nil
}

// OpenSQS returns a backend on the SQS-compatible server at endpoint,
// for the harness's own reads (it never goes through the fault proxy).
func OpenSQS(ctx context.Context, endpoint, region string, topo topology.Topology) (queue.Backend, error) {
	b, err := sqsqueue.New(ctx, sqsqueue.Config{Endpoint: endpoint, Region: region, QueueURLs: topo.QueueURLs, Logger: quietLogger(),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	if err != nil {
		return nil, fmt.Errorf("open the SQS backend: %w", err)
	}
	return b, nil
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
