package drainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// ErrLeaseLost means the drainer no longer holds a message: its visibility
// timeout passed and another consumer may have received it. The receipt
// handle is refused from then on (fencing), so the old holder can neither
// ack nor extend it.
var ErrLeaseLost = errors.New("lease lost")

// lease is a held message: the receipt that lets its holder extend,
// delete or release it.
type lease struct {
	backend queue.Backend
	queue   string
	receipt string
}

func (l *lease) result(errs []error, err error) error {
	if err == nil && len(errs) > 0 {
		err = errs[0]
	}
	if errors.Is(err, queue.ErrReceiptInvalid) {
		return fmt.Errorf("%s: %w: %w", l.queue, ErrLeaseLost, err)
	}
	return err
}

// extend sets the remaining visibility to d.
func (l *lease) extend(ctx context.Context, d time.Duration) error {
	return l.result(l.backend.ChangeVisibility(ctx, &queue.ChangeVisibilityParams{
		Queue: l.queue, Changes: []queue.VisibilityChange{{ReceiptHandle: l.receipt, Timeout: d}},
	}))
}

// ack deletes the message.
func (l *lease) ack(ctx context.Context) error {
	return l.result(l.backend.Delete(ctx, &queue.DeleteParams{Queue: l.queue, ReceiptHandles: []string{l.receipt}}))
}

// Delivery leases: one keeper extends the visibility of every job in
// delivery, in batches per queue, instead of a timer per delivery. Most
// deliveries end long before a third of the visibility timeout, and cost
// the keeper nothing but an entry in a map; on SQS a round of long jobs
// costs one ChangeMessageVisibilityBatch per ten jobs, not a call each.

// inDelivery registers j, whose handler runs with ctx cancelled by cancel,
// with the lease keeper.
func (d *Drainer) inDelivery(j *job, cancel context.CancelFunc) {
	d.leaseMu.Lock()
	j.cancel = cancel
	d.delivering[j] = struct{}{}
	if d.handlerCtx.Err() != nil {
		// Registered after cancelDeliveries ran (it holds leaseMu too):
		// cancelled here instead, as a child of handlerCtx would be.
		cancel()
	}
	d.leaseMu.Unlock()
}

// cancelDeliveries cancels every delivery once handlerCtx ends: their
// contexts are not its children (deliver).
func (d *Drainer) cancelDeliveries() {
	d.leaseMu.Lock()
	defer d.leaseMu.Unlock()
	for j := range d.delivering {
		j.cancel()
	}
}

// delivered takes j off the lease keeper, waits for a renewal of it under
// way (so that none lands after the job is acked, moved or released), and
// reports whether its lease was lost while it ran.
func (d *Drainer) delivered(j *job) (lost bool) {
	d.leaseMu.Lock()
	delete(d.delivering, j)
	renewing := j.renewing
	d.leaseMu.Unlock()
	if renewing != nil {
		<-renewing
	}
	return j.lost.Load()
}

// keepLeases extends, until ctx ends, the lease of each job in delivery
// whose visibility was last set more than a third of its lane's timeout
// ago. A lease the backend refuses is lost: the delivery is cancelled, and
// its job is neither acked nor moved (another consumer has it).
func (d *Drainer) keepLeases(ctx context.Context) {
	t := time.NewTicker(d.renewInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := d.cfg.Now()
		var due []*job
		var renewed chan struct{}
		prev := map[*job]time.Time{}
		d.leaseMu.Lock()
		for j := range d.delivering {
			if now.Sub(j.leasedAt) > j.q.inbox.visibility/3 {
				if renewed == nil {
					renewed = make(chan struct{})
				}
				due = append(due, j)
				prev[j] = j.leasedAt
				j.leasedAt, j.renewing = now, renewed
			}
		}
		d.leaseMu.Unlock()
		if len(due) == 0 {
			continue
		}
		// A round must end before the leases it renews run out.
		rctx, cancel := context.WithTimeout(ctx, 2*d.renewInterval())
		lost, failed := d.renew(rctx, due)
		cancel()
		if len(failed) > 0 {
			d.leaseMu.Lock()
			for _, j := range failed {
				j.leasedAt = prev[j] // due again at the next tick
			}
			d.leaseMu.Unlock()
		}
		for j := range lost {
			j.lost.Store(true)
			d.jobLogger(j).WarnContext(ctx, "lease lost during delivery; cancelling it")
			j.cancel()
		}
		close(renewed)
	}
}

// renewInterval is how often leases are looked at: a sixth of the shortest
// visibility timeout, so that each is renewed between a third and a half
// of it, and at most ten times a second.
func (d *Drainer) renewInterval() time.Duration {
	shortest := time.Duration(0)
	for _, in := range d.lanes {
		if shortest == 0 || in.visibility < shortest {
			shortest = in.visibility
		}
	}
	return max(shortest/6, 100*time.Millisecond)
}
