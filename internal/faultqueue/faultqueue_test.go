package faultqueue_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/internal/faultqueue"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
	"github.com/sluice-dev/sluice/queue/queuetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func openEmbedded(t *testing.T) queue.Backend {
	t.Helper()
	b, err := embeddedqueue.Open(filepath.Join(t.TempDir(), "queues.db"), embeddedqueue.Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformance shows that the wrapper with no fault is the wrapped
// backend: it passes the suite every backend passes.
func TestConformance(t *testing.T) {
	t.Parallel()
	queuetest.Exercise(t.Context(), t, func(t *testing.T) queue.Backend {
		return faultqueue.New(openEmbedded(t))
	})
}

const (
	qa = "fault-a"
	qb = "fault-b"
)

// bundle is a wrapper over a real embedded backend holding two queues, a
// and b, with one message sent to a and received (so Delete and
// ChangeVisibility have a receipt to work on).
type bundle struct {
	inner   queue.Backend
	fq      *faultqueue.Backend
	receipt string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	inner := openEmbedded(t)
	t.Cleanup(func() { _ = inner.Close() })
	ctx := t.Context()
	if err := inner.EnsureQueues(ctx, []queue.QueueSpec{{Name: qa}, {Name: qb}}); err != nil {
		t.Fatal(err)
	}
	if res, err := inner.Send(ctx, &queue.SendParams{Queue: qa, Entries: []queue.SendEntry{{ID: "0", Body: []byte("held")}}}); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	msgs, err := inner.Receive(ctx, &queue.ReceiveParams{Queue: qa, Max: 1, VisibilityTimeout: time.Minute})
	if err != nil || len(msgs) != 1 {
		t.Fatal(err, msgs)
	}
	return &bundle{inner: inner, fq: faultqueue.New(inner), receipt: msgs[0].ReceiptHandle}
}

// calls makes one call of each operation about queue q.
func (b *bundle) calls(q string) map[faultqueue.Op]func(ctx context.Context) error {
	return map[faultqueue.Op]func(ctx context.Context) error{
		faultqueue.OpEnsureQueues: func(ctx context.Context) error {
			return b.fq.EnsureQueues(ctx, []queue.QueueSpec{{Name: q}})
		},
		faultqueue.OpSend: func(ctx context.Context) error {
			_, err := b.fq.Send(ctx, &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "0", Body: []byte("x")}}})
			return err
		},
		faultqueue.OpReceive: func(ctx context.Context) error {
			_, err := b.fq.Receive(ctx, &queue.ReceiveParams{Queue: q, Max: 1})
			return err
		},
		faultqueue.OpDelete: func(ctx context.Context) error {
			_, err := b.fq.Delete(ctx, &queue.DeleteParams{Queue: q, ReceiptHandles: []string{b.receipt}})
			return err
		},
		faultqueue.OpChangeVisibility: func(ctx context.Context) error {
			_, err := b.fq.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{Queue: q, Changes: []queue.VisibilityChange{{ReceiptHandle: b.receipt, Timeout: time.Minute}}})
			return err
		},
		faultqueue.OpStats: func(ctx context.Context) error {
			_, err := b.fq.Stats(ctx, &queue.StatsParams{Queues: []string{q}})
			return err
		},
	}
}

var allOps = []faultqueue.Op{
	faultqueue.OpEnsureQueues, faultqueue.OpSend, faultqueue.OpReceive,
	faultqueue.OpDelete, faultqueue.OpChangeVisibility, faultqueue.OpStats,
}

// TestFaults arms a fault, makes one call of every operation on each queue
// and checks which ones failed, then checks that Wakeup lets every call
// through again.
func TestFaults(t *testing.T) {
	t.Parallel()
	custom := errors.New("disk on fire")
	tests := []struct {
		name    string
		arm     func(*faultqueue.Backend)
		wantErr error
		fails   func(op faultqueue.Op, q string) bool
	}{
		{
			name:    "sleep fails everything",
			arm:     func(b *faultqueue.Backend) { b.Sleep() },
			wantErr: queue.ErrUnavailable,
			fails:   func(faultqueue.Op, string) bool { return true },
		},
		{
			name:    "sleep of one operation",
			arm:     func(b *faultqueue.Backend) { b.Sleep(faultqueue.OpSend) },
			wantErr: queue.ErrUnavailable,
			fails:   func(op faultqueue.Op, _ string) bool { return op == faultqueue.OpSend },
		},
		{
			name: "unavailable on one queue",
			arm: func(b *faultqueue.Backend) {
				b.Inject(faultqueue.Unavailable(qb, faultqueue.OpSend, faultqueue.OpReceive))
			},
			wantErr: queue.ErrUnavailable,
			fails: func(op faultqueue.Op, q string) bool {
				return q == qb && (op == faultqueue.OpSend || op == faultqueue.OpReceive)
			},
		},
		{
			name: "custom error",
			arm: func(b *faultqueue.Backend) {
				b.Inject(func(c faultqueue.Call) error {
					if c.Op == faultqueue.OpDelete {
						return custom
					}
					return nil
				})
			},
			wantErr: custom,
			fails:   func(op faultqueue.Op, _ string) bool { return op == faultqueue.OpDelete },
		},
		{
			name:  "nothing armed",
			arm:   func(*faultqueue.Backend) {},
			fails: func(faultqueue.Op, string) bool { return false },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()
			tt.arm(b.fq)
			wantFailed := map[faultqueue.Op]int64{}
			for _, q := range []string{qa, qb} {
				calls := b.calls(q)
				for _, op := range allOps {
					err := calls[op](ctx)
					if !tt.fails(op, q) {
						// Delete and ChangeVisibility of a's receipt on b
						// reach the backend, which rejects the receipt:
						// that is the real backend answering, not a fault.
						if err != nil && !errors.Is(err, queue.ErrReceiptInvalid) {
							t.Errorf("%s on %s: %v, want it through", op, q, err)
						}
						continue
					}
					wantFailed[op]++
					if !errors.Is(err, tt.wantErr) {
						t.Errorf("%s on %s: %v, want %v", op, q, err, tt.wantErr)
					}
				}
			}
			for _, op := range allOps {
				if got := b.fq.Failed(op); got != wantFailed[op] {
					t.Errorf("Failed(%s) = %d, want %d", op, got, wantFailed[op])
				}
			}
			b.fq.Wakeup()
			for _, q := range []string{qa, qb} {
				for op, call := range b.calls(q) {
					if err := call(ctx); err != nil && !errors.Is(err, queue.ErrReceiptInvalid) {
						t.Errorf("after Wakeup, %s on %s: %v", op, q, err)
					}
				}
			}
		})
	}
}

// TestFailedCallDoesNothing shows a failed call never reaches the wrapped
// backend: a failed Send stores nothing, a failed Delete leaves the
// message, a failed ChangeVisibility leaves its lease.
func TestFailedCallDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.fq.Sleep()
	if _, err := b.fq.Send(ctx, &queue.SendParams{Queue: qb, Entries: []queue.SendEntry{{ID: "0", Body: []byte("lost?")}}}); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("Send while asleep: %v", err)
	}
	if _, err := b.fq.Delete(ctx, &queue.DeleteParams{Queue: qa, ReceiptHandles: []string{b.receipt}}); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("Delete while asleep: %v", err)
	}
	if _, err := b.fq.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{Queue: qa, Changes: []queue.VisibilityChange{{ReceiptHandle: b.receipt}}}); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("ChangeVisibility while asleep: %v", err)
	}
	st, err := b.inner.Stats(ctx, &queue.StatsParams{Queues: []string{qa, qb}})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].InFlight != 1 || st[0].Visible != 0 {
		t.Fatalf("queue a after failed Delete and ChangeVisibility: %+v, want its message still held", st[0])
	}
	if st[1].Visible+st[1].InFlight+st[1].Delayed != 0 {
		t.Fatalf("queue b after a failed Send: %+v, want empty", st[1])
	}
	b.fq.Wakeup()
	errs, err := b.fq.Delete(ctx, &queue.DeleteParams{Queue: qa, ReceiptHandles: []string{b.receipt}})
	if err != nil || errs[0] != nil {
		t.Fatalf("Delete after Wakeup: %v %v; the receipt should still be held", err, errs)
	}
}

// TestFaultSeesEveryQueue checks that a Stats or EnsureQueues naming
// several queues fails when the fault fails any one of them.
func TestFaultSeesEveryQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.fq.Inject(faultqueue.Unavailable(qb))
	if _, err := b.fq.Stats(ctx, &queue.StatsParams{Queues: []string{qa, qb}}); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("Stats of a and b: %v, want unavailable for b", err)
	}
	if err := b.fq.EnsureQueues(ctx, []queue.QueueSpec{{Name: qa}, {Name: qb}}); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("EnsureQueues of a and b: %v, want unavailable for b", err)
	}
	if _, err := b.fq.Stats(ctx, &queue.StatsParams{Queues: []string{qa}}); err != nil {
		t.Fatalf("Stats of a alone: %v", err)
	}
	if got := b.fq.Failed(faultqueue.OpStats); got != 1 {
		t.Fatalf("Failed(Stats) = %d, want 1", got)
	}
}
