package reliability

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	"github.com/sluice-dev/sluice/queue"
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
// dead-letter queues and those left in the other queues (see readQueue).
func ReadFinal(ctx context.Context, b queue.Backend, topo topology.Topology) ([]DeadLetter, Leftovers, error) {
	var dead []DeadLetter
	var left Leftovers
	for _, q := range topo.Queues() {
		jobs, inFlight, err := readQueue(ctx, b, q.Spec.Name, readVisibility)
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

// readVisibility is how long a message the harness has read stays hidden.
// It is short on purpose: an SQS client can lose the answer to a
// ReceiveMessage the server acted on (the SDK reads a 200 whose body it
// then fails to read, "use of closed network connection", and retries; see
// aws/aws-sdk-go-v2#1825), and the messages of that answer are hidden for
// the whole visibility timeout. With an hour, as the harness first used,
// they stayed hidden past the end of the read and their jobs looked lost.
const readVisibility = 20 * time.Second

// readQueue receives every message of a queue, hiding each for visibility
// as it reads, and returns their jobs, once each, and how many messages were hidden by an earlier receive when it
// began (those cannot be read).
//
// It reads until the queue has nothing visible or delayed and every
// message in flight is one it read (or was in flight before): if more are
// in flight, an answer was lost on the way, and it keeps reading until
// those messages come back, deduplicating by message id.
func readQueue(ctx context.Context, b queue.Backend, name string, visibility time.Duration) ([]DeadLetter, int64, error) {
	stats := func() (queue.Stats, error) {
		st, err := b.Stats(ctx, &queue.StatsParams{Queues: []string{name}})
		if err != nil {
			return queue.Stats{}, fmt.Errorf("read %s: %w", name, err)
		}
		return st[0], nil
	}
	before, err := stats()
	if err != nil {
		return nil, 0, err
	}
	var jobs []DeadLetter
	seen := map[string]bool{}
	deadline := time.Now().Add(2*time.Minute + visibility)
	for empties := 0; ; {
		if empties >= 3 {
			// Empty receives alone do not prove the queue read (a server
			// may answer a long poll early, an answer may be lost): its
			// counts must agree.
			st, err := stats()
			if err != nil {
				return nil, 0, err
			}
			if st.Visible+st.Delayed == 0 && st.InFlight <= int64(len(seen))+before.InFlight {
				return jobs, before.InFlight, nil
			}
			if time.Now().After(deadline) {
				return nil, 0, fmt.Errorf("read %s: after %s, %d messages visible or delayed and %d in flight, of which the harness read %d",
					name, 2*time.Minute+visibility, st.Visible+st.Delayed, st.InFlight, len(seen))
			}
			empties = 0
		}
		msgs, err := b.Receive(ctx, &queue.ReceiveParams{Queue: name, Max: queue.MaxBatch, Wait: 200 * time.Millisecond, VisibilityTimeout: visibility})
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", name, err)
		}
		if len(msgs) == 0 {
			empties++
			continue
		}
		empties = 0
		for _, m := range msgs {
			if seen[m.MessageID] {
				continue // read before, visible again
			}
			seen[m.MessageID] = true
			env, err := envelope.Decode(m.Body)
			if err != nil {
				jobs = append(jobs, DeadLetter{JobID: "malformed:" + m.MessageID, Payload: string(m.Body)})
				continue
			}
			jobs = append(jobs, DeadLetter{JobID: env.GetJobId(), Payload: string(env.GetPayload()), Reason: env.GetDeadLetterReason()})
		}
	}
}
