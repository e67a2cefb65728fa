package sqsqueue

import (
	"sync"
	"time"
)

// leases remembers, for the receipt handles this backend handed out, a
// time before which the message's visibility timeout cannot have expired:
// the moment the Receive (or the last ChangeMessageVisibility) request was
// sent plus its timeout. SQS starts the timeout later than that, so the
// real lease lasts at least as long. While it holds, no other consumer can
// have received the message, the handle is the latest, and a Delete needs
// no fencing call.
type leases struct {
	mu    sync.Mutex
	until map[string]time.Time
	adds  int // since the last sweep
}

// sweepEvery is how many holds pass between sweeps of expired entries, so
// the map stays the size of the messages in flight.
const sweepEvery = 4096

func (l *leases) hold(handle string, until time.Time) {
	if handle == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.until == nil {
		l.until = make(map[string]time.Time)
	}
	l.until[handle] = until
	if l.adds++; l.adds >= sweepEvery {
		l.adds = 0
		now := time.Now()
		for h, u := range l.until {
			if now.After(u) {
				delete(l.until, h)
			}
		}
	}
}

func (l *leases) drop(handle string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.until, handle)
}

// heldPast reports whether handle's lease is known to hold past t.
func (l *leases) heldPast(handle string, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	u, ok := l.until[handle]
	return ok && u.After(t)
}
