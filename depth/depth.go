// Package depth keeps an approximate, cheap view of queue depths for the
// router (least-deep shard) and the gateway's high-water-mark check, so that
// no Submit ever calls the backend just to read a depth.
//
// A Cache refreshes every queue's Stats from the backend on a timer and
// adds local sends in between, so a burst from this process is seen at once
// rather than after the next refresh.
package depth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/queue"
)

// IntervalDefault is the refresh period when Config.Interval is zero.
const IntervalDefault = time.Second

// Config configures a Cache.
type Config struct {
	// Backend to read Stats from. Required.
	Backend queue.Backend
	// Queues to track. Required.
	Queues []string
	// Interval between refreshes. Defaults to one second.
	Interval time.Duration
	// Logger for refresh failures. Defaults to slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called with every queue's Stats after each
	// refresh (to export them as metrics).
	Observe func(queue.Stats)
}

type entry struct {
	waiting  atomic.Int64 // visible + delayed from the last refresh, plus local sends since
	inFlight atomic.Int64
	oldest   atomic.Int64 // nanoseconds
}

// Cache holds the last known depth of each queue. Reads are lock-free.
type Cache struct {
	cfg     Config
	entries map[string]*entry // fixed at construction; values updated atomically

	life startstop.Runner
}

// New returns a cache for cfg.Queues. Call Refresh or Start to fill it.
func New(cfg Config) *Cache {
	if cfg.Interval <= 0 {
		cfg.Interval = IntervalDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cache{cfg: cfg, entries: make(map[string]*entry, len(cfg.Queues))}
	for _, q := range cfg.Queues {
		c.entries[q] = &entry{}
	}
	return c
}

// Refresh reads every queue's Stats once. Backend.Stats fails a whole call
// for one queue it cannot read, so a chunk that fails is read again queue
// by queue: one deleted or unreadable queue leaves its own depth as it was
// and the others are still refreshed. The error joins every queue's.
func (c *Cache) Refresh(ctx context.Context) error {
	var errs []error
	for start := 0; start < len(c.cfg.Queues); start += 100 {
		names := c.cfg.Queues[start:min(start+100, len(c.cfg.Queues))]
		stats, err := c.cfg.Backend.Stats(ctx, &queue.StatsParams{Queues: names})
		if err == nil {
			c.store(stats)
			continue
		}
		if ctx.Err() != nil {
			return errors.Join(append(errs, err)...)
		}
		if len(names) == 1 {
			errs = append(errs, err)
			continue
		}
		for _, name := range names {
			stats, err := c.cfg.Backend.Stats(ctx, &queue.StatsParams{Queues: []string{name}})
			if err != nil {
				errs = append(errs, err)
				if ctx.Err() != nil {
					return errors.Join(errs...)
				}
				continue
			}
			c.store(stats)
		}
	}
	return errors.Join(errs...)
}

func (c *Cache) store(stats []queue.Stats) {
	for _, s := range stats {
		e := c.entries[s.Queue]
		if e == nil {
			continue
		}
		e.waiting.Store(s.Visible + s.Delayed)
		e.inFlight.Store(s.InFlight)
		e.oldest.Store(int64(s.OldestAge))
		if c.cfg.Observe != nil {
			c.cfg.Observe(s)
		}
	}
}

// Start refreshes once, then every Interval until Stop (see
// internal/startstop). A failed first refresh fails Start; a later one is
// logged and the old values of the queues it could not read are kept.
func (c *Cache) Start(ctx context.Context) error {
	if err := c.Refresh(ctx); err != nil {
		return err
	}
	return c.life.Start(ctx, func(ctx context.Context) {
		periodic.Every(ctx, c.cfg.Interval, func(ctx context.Context) {
			if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Logger.WarnContext(ctx, "refresh queue depths", slog.Any("error", err))
			}
		})
	})
}

// Stop ends the refresh loop and waits for it until ctx ends. Idempotent;
// safe without Start.
func (c *Cache) Stop(ctx context.Context) error {
	if err := c.life.Stop(ctx); err != nil {
		return fmt.Errorf("depth: %w", err)
	}
	return nil
}

// Waiting returns the messages waiting in q (visible or delayed), zero for
// an unknown queue.
func (c *Cache) Waiting(q string) int64 {
	if e := c.entries[q]; e != nil {
		return e.waiting.Load()
	}
	return 0
}

// Pending returns the messages of q not yet done: waiting (visible or
// delayed) and in flight (being delivered, or read ahead and held by a
// drainer). It is what a lane's high-water mark limits.
func (c *Cache) Pending(q string) int64 {
	if e := c.entries[q]; e != nil {
		return e.waiting.Load() + e.inFlight.Load()
	}
	return 0
}

// Add records n messages sent to q by this process since the last refresh.
func (c *Cache) Add(q string, n int64) {
	if e := c.entries[q]; e != nil {
		e.waiting.Add(n)
	}
}
