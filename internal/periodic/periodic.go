// Package periodic holds the two timing loops sluice's services share: a
// context-aware Sleep and Every, the ticker loop of every janitor
// (idle-bucket eviction, depth refresh, retention sweep, lease renewal).
package periodic

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, and reports whether the whole d
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Every calls f every interval, the first time one interval from now,
// until ctx ends; it returns then, and calls f no more once ctx has ended
// (so f may cancel ctx to stop the loop). A call of f is never
// interrupted: ctx is passed to it to end its work early. A non-positive interval returns
// at once without calling f.
func Every(ctx context.Context, interval time.Duration, f func(ctx context.Context)) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ctx.Err() != nil { // both were ready: ending wins
				return
			}
			f(ctx)
		}
	}
}
