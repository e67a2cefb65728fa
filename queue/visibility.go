package queue

import (
	"context"
	"fmt"
	"time"
)

// SetVisibility sets the visibility of every receipt in q to timeout, in
// batches of MaxBatch, and returns the first call error. Per-entry
// refusals are not errors: they mean the lease is already gone, which is
// what a caller handing messages back or renewing a scan can live with.
// The drainer uses it to hand back jobs it received but never started, and
// the admin API's DLQ scans to renew and release their hold.
func SetVisibility(ctx context.Context, b Backend, q string, receipts []string, timeout time.Duration) error {
	var first error
	for start := 0; start < len(receipts); start += MaxBatch {
		chunk := receipts[start:min(start+MaxBatch, len(receipts))]
		changes := make([]VisibilityChange, len(chunk))
		for i, r := range chunk {
			changes[i] = VisibilityChange{ReceiptHandle: r, Timeout: timeout}
		}
		if _, err := b.ChangeVisibility(ctx, &ChangeVisibilityParams{Queue: q, Changes: changes}); err != nil && first == nil {
			first = fmt.Errorf("set visibility in %s: %w", q, err)
		}
	}
	return first
}
