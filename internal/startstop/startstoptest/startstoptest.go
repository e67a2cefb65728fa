// Package startstoptest checks that a Service keeps the startstop
// lifecycle: Stop is safe before Start and idempotent, Start twice or
// after Stop fails, and Stop is bounded by its context.
package startstoptest

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/startstop"
)

// Exercise runs the lifecycle checks as subtests, each on a fresh Service
// from newService.
func Exercise(t *testing.T, newService func(t *testing.T) startstop.Service) {
	t.Helper()
	stop := func(t *testing.T, s startstop.Service) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return s.Stop(ctx)
	}
	t.Run("StopBeforeStart", func(t *testing.T) {
		s := newService(t)
		if err := stop(t, s); err != nil {
			t.Fatalf("Stop before Start: %v", err)
		}
		if err := stop(t, s); err != nil {
			t.Fatalf("second Stop before Start: %v", err)
		}
		if err := s.Start(t.Context()); err == nil {
			_ = stop(t, s)
			t.Fatal("Start after Stop succeeded")
		}
	})
	t.Run("StartStopStop", func(t *testing.T) {
		s := newService(t)
		if err := s.Start(t.Context()); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if err := s.Start(t.Context()); err == nil {
			t.Error("second Start succeeded")
		}
		if err := stop(t, s); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if err := stop(t, s); err != nil {
			t.Fatalf("second Stop: %v", err)
		}
	})
	t.Run("StartEndsWithoutStop", func(t *testing.T) {
		// The start context's end does not stop the service: Stop still
		// does, and reports no error.
		s := newService(t)
		ctx, cancel := context.WithCancel(t.Context())
		if err := s.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		cancel()
		if err := stop(t, s); err != nil {
			t.Fatalf("Stop after the start context ended: %v", err)
		}
	})
}
