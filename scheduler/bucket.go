package scheduler

import (
	"math"
	"time"
)

// bucket is a token bucket kept as one theoretical arrival time (GCRA):
// no lock and a few integer operations per check, and readyAt tells the
// index's timers when the next token comes.
type bucket struct {
	interval int64 // nanoseconds per token
	burst    int64
	tat      int64 // theoretical arrival time, Unix nanoseconds: full at or before now
}

// set changes the rate and burst, keeping the tokens it holds.
func (b *bucket) set(rate float64, burst int, now time.Time) {
	interval := int64(math.Max(1, math.Round(float64(time.Second)/rate)))
	if b.interval == interval && b.burst == int64(burst) {
		return
	}
	n := now.UnixNano()
	tokens := b.tokens(n)
	b.interval, b.burst = interval, int64(burst)
	if b.tat == 0 { // new: full
		b.tat = n
		return
	}
	b.tat = n + (b.burst-min(tokens, b.burst))*b.interval
}

// tokens is the whole tokens held at n.
func (b *bucket) tokens(n int64) int64 {
	if b.interval == 0 {
		return 0
	}
	if b.tat <= n {
		return b.burst
	}
	return max(0, b.burst-(b.tat-n+b.interval-1)/b.interval)
}

// wait is the time until the bucket holds a token.
func (b *bucket) wait(now time.Time) time.Duration {
	return time.Duration(max(b.readyAt()-now.UnixNano(), 0))
}

// readyAt is when the bucket next holds a token, in Unix nanoseconds: at
// or before now if it holds one.
func (b *bucket) readyAt() int64 { return b.tat - (b.burst-1)*b.interval }

// take takes a token if there is one, and reports whether it did.
func (b *bucket) take(now time.Time) bool {
	if b.wait(now) > 0 {
		return false
	}
	b.tat = max(b.tat, now.UnixNano()) + b.interval
	return true
}

// full reports whether the bucket holds its whole burst.
func (b *bucket) full(now time.Time) bool { return b.tat <= now.UnixNano() }
