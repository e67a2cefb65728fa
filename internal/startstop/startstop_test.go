package startstop_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/internal/startstop"
	"github.com/sluice-dev/sluice/internal/startstop/startstoptest"
)

// loop is the smallest Service: one goroutine until Stop, taking hold to
// stop once cancelled.
type loop struct {
	startstop.Runner
	hold time.Duration
}

func (l *loop) Start(ctx context.Context) error {
	return l.Runner.Start(ctx, func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(l.hold)
	})
}

func TestRunner(t *testing.T) {
	t.Parallel()
	startstoptest.Exercise(t, func(*testing.T) startstop.Service { return &loop{} })
}

func TestRunnerStopIsBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := &loop{hold: time.Hour}
		if err := l.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		err := l.Stop(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("Stop = %v after %s, want a deadline error after 1s", err, time.Since(start))
		}
		if again := l.Stop(t.Context()); !errors.Is(again, context.DeadlineExceeded) {
			t.Fatalf("second Stop = %v, want the first's result", again)
		}
		synctest.Wait() // the goroutine is still stopping; let it finish
		time.Sleep(time.Hour)
	})
}

func TestRunnerStartErrors(t *testing.T) {
	t.Parallel()
	var l loop
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(t.Context()); !errors.Is(err, startstop.ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
	if err := l.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(t.Context()); !errors.Is(err, startstop.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}
