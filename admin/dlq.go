package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/envelope"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/topology"
)

// Dead-letter queues cannot be browsed without receiving (SQS has no
// peek), so a scan receives every message of a DLQ under a lease, looks at
// it, and hands back what it does not move when it ends. While one scan
// holds a message no other scan or replay can receive it: that is what
// keeps two overlapping replays from moving the same job twice.
const (
	// scanLease is the visibility a scan holds messages with; a heartbeat
	// renews it while the scan runs.
	scanLease = 2 * time.Minute
	// maxScan bounds the messages one scan holds at once.
	maxScan = 100_000
	// opTimeout bounds one backend call made outside a request's context.
	opTimeout = 30 * time.Second
)

// errScanLimit ends a scan that reached its bound of messages held.
var errScanLimit = errors.New("narrow the filter (tenant, reason, time)")

// dlqMessage is one received DLQ message and its decoded envelope (nil if
// the body is not a valid envelope, and bad says why).
type dlqMessage struct {
	queue string
	lane  string
	msg   queue.Message
	env   *envelope.Envelope
	bad   error
}

// dlqScan holds the messages it has received until release.
type dlqScan struct {
	backend queue.Backend
	log     *slog.Logger
	mu      sync.Mutex
	held    map[string][]string // queue → receipt handles still held
	limit   int                 // most messages held at once (maxScan)
	stop    context.CancelFunc  // ends the heartbeat
	done    chan struct{}
}

func newDLQScan(backend queue.Backend, log *slog.Logger, limit int) *dlqScan {
	ctx, stop := context.WithCancel(context.Background())
	s := &dlqScan{backend: backend, log: log, held: map[string][]string{}, limit: limit, stop: stop, done: make(chan struct{})}
	go s.heartbeat(ctx)
	return s
}

// each receives every visible message of the named DLQs in turn and calls
// fn for it until fn returns false or the queues are exhausted. Messages
// stay held until release; fn may delete one and call forget.
func (s *dlqScan) each(ctx context.Context, queues map[string]string, order []string, fn func(m *dlqMessage) (more bool, err error)) error {
	for _, q := range order {
		var wait time.Duration
		for confirms := 0; ; {
			msgs, err := s.backend.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: queue.MaxBatch, Wait: wait, VisibilityTimeout: scanLease})
			if err != nil {
				return fmt.Errorf("read %s: %w", q, err)
			}
			if len(msgs) == 0 {
				// An empty answer ends the queue when its stats agree. On
				// SQS a receive that does not wait asks only some of its
				// servers and can come back empty while messages wait;
				// then a long poll, which asks them all, reads on.
				if confirms++; confirms > maxScanConfirms || !s.visibleLeft(ctx, q) {
					break
				}
				wait = time.Second
				continue
			}
			wait = 0
			s.mu.Lock()
			for _, m := range msgs {
				s.held[q] = append(s.held[q], m.ReceiptHandle)
			}
			s.mu.Unlock()
			for _, m := range msgs {
				dm := &dlqMessage{queue: q, lane: queues[q], msg: m}
				dm.env, dm.bad = envelope.Decode(m.Body)
				more, err := fn(dm)
				if err != nil || !more {
					return err
				}
			}
			// What fn moved is no longer held: a replay moves any number.
			if s.holding() >= s.limit {
				return fmt.Errorf("the dead-letter queues hold more than %d messages to look at: %w", s.limit, errScanLimit)
			}
		}
	}
	return nil
}

// maxScanConfirms bounds the long polls one scan of a queue makes after
// empty answers while the queue's stats still count visible messages
// (approximate on SQS, and others may be sending to it).
const maxScanConfirms = 3

// visibleLeft reports whether q's stats count visible messages; an error
// counts as none (the scan ends as it would have).
func (s *dlqScan) visibleLeft(ctx context.Context, q string) bool {
	st, err := s.backend.Stats(ctx, &queue.StatsParams{Queues: []string{q}})
	return err == nil && len(st) == 1 && st[0].Visible > 0
}

// holding counts the messages held.
func (s *dlqScan) holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, receipts := range s.held {
		n += len(receipts)
	}
	return n
}

// forget stops holding a message that fn deleted.
func (s *dlqScan) forget(q, receipt string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[q] = slices.DeleteFunc(s.held[q], func(r string) bool { return r == receipt })
}

// release ends the heartbeat and makes every held message visible again.
func (s *dlqScan) release() {
	s.stop()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changeAll(ctx, 0)
	s.held = map[string][]string{}
}

func (s *dlqScan) heartbeat(ctx context.Context) {
	defer close(s.done)
	periodic.Every(ctx, scanLease/3, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.changeAll(ctx, scanLease)
	})
}

// changeAll sets the visibility of every held message; callers hold s.mu.
func (s *dlqScan) changeAll(ctx context.Context, timeout time.Duration) {
	for q, receipts := range s.held {
		if err := queue.SetVisibility(ctx, s.backend, q, receipts, timeout); err != nil {
			s.log.WarnContext(ctx, "renew or release DLQ scan lease", slog.String("queue", q), slog.Any("error", err))
		}
	}
}

// dlqQueues returns the DLQs a filter reads (queue → lane) in topology
// order, or an error naming an unknown lane.
func dlqQueues(topo topology.Topology, f *adminv1.DLQFilter) (map[string]string, []string, error) {
	want := f.GetLanes()
	for _, l := range want {
		if _, ok := topo.Lane(l); !ok {
			return nil, nil, errors.New(unknownLane(topo, l))
		}
	}
	out := map[string]string{}
	var order []string
	for _, l := range topo.Lanes {
		if len(want) == 0 || slices.Contains(want, l.Name) {
			q := topo.DLQ(l.Name)
			out[q] = l.Name
			order = append(order, q)
		}
	}
	return out, order, nil
}

// unknownLane says that the topology has no lane name, and which lanes it
// has: "unknown lane" alone left the operator to find them (found in a
// walkthrough).
func unknownLane(topo topology.Topology, name string) string {
	lanes := make([]string, len(topo.Lanes))
	for i, l := range topo.Lanes {
		lanes[i] = l.Name
	}
	return fmt.Sprintf("unknown lane %q (the lanes are %s)", name, strings.Join(lanes, ", "))
}

// matches reports whether a DLQ message passes the filter. A body that is
// not an envelope has no tenant or time: it matches only a filter on
// every tenant and no time range.
func matches(f *adminv1.DLQFilter, m *dlqMessage) bool {
	env := m.env
	if env == nil {
		return len(f.GetTenants()) == 0 && f.GetEnqueuedAfter() == nil && f.GetEnqueuedBefore() == nil &&
			strings.HasPrefix(reasonOf(m), f.GetReasonPrefix())
	}
	if ts := f.GetTenants(); len(ts) > 0 && !slices.Contains(ts, env.GetTenant()) {
		return false
	}
	at := env.GetEnqueuedAt().AsTime()
	if a := f.GetEnqueuedAfter(); a != nil && at.Before(a.AsTime()) {
		return false
	}
	if b := f.GetEnqueuedBefore(); b != nil && !at.Before(b.AsTime()) {
		return false
	}
	return strings.HasPrefix(reasonOf(m), f.GetReasonPrefix())
}

// reasonOf is the dead-letter reason: the drainer's, or the backend's
// redrive after too many receives. A malformed body's reason is worked
// out again from the body, since it has nowhere to carry one:
// "malformed_envelope: no tenant".
func reasonOf(m *dlqMessage) string {
	if m.env == nil {
		if m.bad == nil {
			return string(sideliner.ReasonMalformed)
		}
		return string(sideliner.ReasonMalformed) + ": " + m.bad.Error()
	}
	if r := m.env.GetDeadLetterReason(); r != "" {
		return r
	}
	return reasonMaxReceives
}

// reasonMaxReceives is the reason of a job the backend redrove after too
// many receives: it carries none of its own.
const reasonMaxReceives = "max_receives_exceeded"

// deadLetterReasons are every reason reasonOf can give, before any detail
// after ": ".
var deadLetterReasons = []string{
	string(sideliner.ReasonAttemptsExhausted), string(sideliner.ReasonPermanentFailure),
	string(sideliner.ReasonMalformed), string(sideliner.ReasonPanic), reasonMaxReceives,
}

// knownReasonPrefix reports whether some dead letter's reason can start
// with p: p is the start of a reason, or a reason and then its detail.
func knownReasonPrefix(p string) bool {
	for _, r := range deadLetterReasons {
		if strings.HasPrefix(r, p) || strings.HasPrefix(p, r+": ") {
			return true
		}
	}
	return false
}
