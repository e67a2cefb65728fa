package idlewait

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := make(chan int)
		stop := make(chan struct{})
		w := Waiter[int]{Idle: time.Second}
		defer w.Stop()

		go func() { next <- 7 }()
		if item, ok := w.Next(next, stop); !ok || item != 7 {
			t.Fatalf("Next = %d, %v; want 7, true", item, ok)
		}

		// Handed just before the idle time ends: taken (the timer was reset).
		go func() {
			time.Sleep(time.Second - time.Millisecond)
			next <- 8
		}()
		if item, ok := w.Next(next, stop); !ok || item != 8 {
			t.Fatalf("Next = %d, %v; want 8, true", item, ok)
		}

		start := time.Now()
		if _, ok := w.Next(next, stop); ok {
			t.Fatal("Next with nothing handed = true, want false")
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("waited %v with nothing handed, want the idle time, 1s", waited)
		}

		close(stop)
		start = time.Now()
		if _, ok := w.Next(next, stop); ok || time.Since(start) != 0 {
			t.Errorf("Next after stop = %v after %v, want false at once", ok, time.Since(start))
		}
	})
}
