package admin

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// scanGate keeps this process's scans of one DLQ from overlapping. A scan
// hides every message it receives from every other scan until it ends, so
// two scans of one DLQ each see only part of it: a list came back short
// without saying so, a dry run under-counted, and a replay ended "done"
// while jobs it matched stayed in the DLQ, held by another scan at the
// moment it looked. Short scans (a list, a dry run) wait for each other;
// a replay waits for whatever holds its DLQs; a short scan does not wait
// for a replay (that can take hours) but is refused, naming it.
//
// The gate is per process: scans on two drainers of one SQS fleet can
// still overlap.
type scanGate struct {
	mu      sync.Mutex
	holders map[string]scanHolder // DLQ → who scans it
	changed chan struct{}         // closed and replaced when a scan leaves
}

type scanHolder struct {
	replayID string // "" for a list
	long     bool   // a replay that moves jobs
}

// replayHoldsError refuses a list or dry run while a replay scans DLQs
// it reads: queues are every one of them the replay scans, not only the
// first found. (Naming the first, a replay of every lane whose jobs were
// all in the standard lane's DLQ was reported as moving jobs out of the
// premium lane's.)
type replayHoldsError struct {
	replayID string
	queues   []string
}

func (e *replayHoldsError) Error() string {
	return fmt.Sprintf("replay %s is scanning %s (moving the jobs it matches) and holds the messages it has read, so this scan would miss them; "+
		"wait for it to end (sluicectl dlq status %s) or cancel it (sluicectl dlq cancel %s)",
		e.replayID, strings.Join(e.queues, ", "), e.replayID, e.replayID)
}

func newScanGate() *scanGate {
	return &scanGate{holders: map[string]scanHolder{}, changed: make(chan struct{})}
}

// enter waits until no other scan of this process reads any of queues and
// marks them as read by h; call leave when the scan has handed back what
// it held. A short scan fails at once with a *replayHoldsError if a
// replay reads one of them. It returns ctx's error if ctx ends first.
func (g *scanGate) enter(ctx context.Context, queues []string, h scanHolder) (leave func(), err error) {
	for {
		g.mu.Lock()
		busy := false
		var held *replayHoldsError
		for _, q := range queues {
			other, ok := g.holders[q]
			if !ok {
				continue
			}
			busy = true
			switch {
			case !other.long || h.long:
			case held == nil:
				held = &replayHoldsError{replayID: other.replayID, queues: []string{q}}
			case held.replayID == other.replayID:
				held.queues = append(held.queues, q)
			}
		}
		if held != nil {
			g.mu.Unlock()
			return nil, held
		}
		if !busy {
			for _, q := range queues {
				g.holders[q] = h
			}
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.leave(queues) }) }, nil
		}
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (g *scanGate) leave(queues []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range queues {
		delete(g.holders, q)
	}
	close(g.changed)
	g.changed = make(chan struct{})
}
