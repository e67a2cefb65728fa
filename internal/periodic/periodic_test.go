package periodic_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/internal/periodic"
)

func TestSleep(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !periodic.Sleep(t.Context(), time.Minute) || time.Since(start) != time.Minute {
			t.Fatalf("Sleep(1m) returned after %s", time.Since(start))
		}
		if !periodic.Sleep(t.Context(), 0) || time.Since(start) != time.Minute {
			t.Fatal("Sleep(0) waited or reported false")
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		if periodic.Sleep(ctx, time.Hour) || time.Since(start) != time.Second {
			t.Fatalf("Sleep(1h) with a 1s context returned true or after %s", time.Since(start))
		}
		if periodic.Sleep(ctx, 0) {
			t.Fatal("Sleep(0) on an ended context reported true")
		}
	})
}

func TestEvery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		runFor   time.Duration
		want     int
	}{
		{"ticks until ctx ends", 10 * time.Second, 35 * time.Second, 3},
		{"first call one interval in", time.Minute, 59 * time.Second, 0},
		{"non-positive interval never calls", 0, time.Hour, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), tt.runFor)
				defer cancel()
				var calls []time.Duration
				start := time.Now()
				periodic.Every(ctx, tt.interval, func(context.Context) { calls = append(calls, time.Since(start)) })
				if len(calls) != tt.want {
					t.Fatalf("%d calls (%v), want %d", len(calls), calls, tt.want)
				}
				for i, at := range calls {
					if want := time.Duration(i+1) * tt.interval; at != want {
						t.Fatalf("call %d at %s, want %s", i, at, want)
					}
				}
			})
		})
	}
}
