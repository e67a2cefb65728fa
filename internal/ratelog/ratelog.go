// Package ratelog bounds log lines that come in floods: one line of a
// kind per interval (Every), the next one counting those left out.
// Logs often live on the disk whose failure causes the flood: a full or
// read-only disk made the gateway log two lines per refused call, about
// 1,700 lines a second (found by a tester).
package ratelog

import (
	"cmp"
	"log/slog"
	"sync"
	"time"
)

// Every is how often at most a line of one kind is logged.
const Every = 10 * time.Second

// Line is one kind of log line. The zero Line logs at most once per
// Every; it is safe for concurrent use.
type Line struct {
	// Interval overrides Every when not zero (tests).
	Interval time.Duration
	// Now is the clock; nil is time.Now (tests).
	Now func() time.Time

	mu      sync.Mutex
	next    time.Time // no line before then
	skipped int64     // lines left out since the last one
}

// Do calls log, with the number of lines left out since the last one it
// let through, if Interval has passed since then (or it is the first);
// else it counts the line as left out. It reports whether log was called.
// log runs with no lock held.
func (l *Line) Do(log func(skipped int64)) bool {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	t := now()
	l.mu.Lock()
	if t.Before(l.next) {
		l.skipped++
		l.mu.Unlock()
		return false
	}
	l.next = t.Add(cmp.Or(l.Interval, Every))
	n := l.skipped
	l.skipped = 0
	l.mu.Unlock()
	log(n)
	return true
}

// Lines are lines of several kinds, told apart by a key of type K, each
// with a Line of its own. Keys must come from a small set (a method and
// a code, a message), never from a request: each key's Line is kept for
// ever.
type Lines[K comparable] struct {
	// Interval and Now are each Line's (see Line).
	Interval time.Duration
	Now      func() time.Time

	mu sync.Mutex
	m  map[K]*Line
}

// Do is Line.Do for key's Line.
func (ls *Lines[K]) Do(key K, log func(skipped int64)) bool {
	ls.mu.Lock()
	l := ls.m[key]
	if l == nil {
		if ls.m == nil {
			ls.m = map[K]*Line{}
		}
		l = &Line{Interval: ls.Interval, Now: ls.Now}
		ls.m[key] = l
	}
	ls.mu.Unlock()
	return l.Do(log)
}

// Suppressed is the attribute that counts the lines left out since the
// last one, or an empty attribute (which slog drops) when there were
// none.
func Suppressed(n int64) slog.Attr {
	if n == 0 {
		return slog.Attr{}
	}
	return slog.Int64("suppressed_since_last_line", n)
}
