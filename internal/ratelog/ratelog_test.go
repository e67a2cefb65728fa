package ratelog

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLineCountsWhatItLeavesOut: a Line lets the first line through,
// leaves out those within Every of it, and the next line it lets through
// counts them.
func TestLineCountsWhatItLeavesOut(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		name string
		at   []time.Duration // when each line comes, from t0
		want []int64         // the counts of the lines let through
	}{
		{"one", []time.Duration{0}, []int64{0}},
		{"a burst", []time.Duration{0, 1, 2, 3}, []int64{0}},
		{"a burst, then one after the interval", []time.Duration{0, time.Second, 9 * time.Second, Every}, []int64{0, 2}},
		{"spread out", []time.Duration{0, Every, 2 * Every}, []int64{0, 0, 0}},
		{"a burst in each interval", []time.Duration{0, 1, Every, Every + 1, Every + 2, 2 * Every}, []int64{0, 1, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var now time.Time
			l := Line{Now: func() time.Time { return now }}
			var got []int64
			for _, d := range tt.at {
				now = t0.Add(d)
				l.Do(func(n int64) { got = append(got, n) })
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("lines logged with counts %v, want %v", got, tt.want)
			}
		})
	}
}

// TestLinesAreKeyedApart: each key has its own Line.
func TestLinesAreKeyedApart(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	ls := Lines[string]{Now: func() time.Time { return now }}
	logged := map[string]int{}
	for range 5 {
		for _, k := range []string{"a", "b"} {
			ls.Do(k, func(int64) { logged[k]++ })
		}
	}
	if logged["a"] != 1 || logged["b"] != 1 {
		t.Errorf("logged %v, want one line of each key", logged)
	}
}

// TestConcurrentLinesCountEveryOne: under concurrent calls (run with
// -race) every line is either logged or counted.
func TestConcurrentLinesCountEveryOne(t *testing.T) {
	t.Parallel()
	var l Line
	var mu sync.Mutex
	var logged, counted int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				l.Do(func(n int64) {
					mu.Lock()
					logged++
					counted += n
					mu.Unlock()
				})
			}
		})
	}
	wg.Wait()
	l.mu.Lock() // the interval has passed
	l.next = time.Time{}
	l.mu.Unlock()
	l.Do(func(n int64) { logged++; counted += n })
	if logged+counted != 8001 {
		t.Errorf("%d logged and %d counted of 8001", logged, counted)
	}
}

// TestSuppressed: the count is an attribute when there is one, and
// nothing when none were left out.
func TestSuppressed(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Warn("x", Suppressed(0))
	log.Warn("y", Suppressed(3))
	if got := buf.String(); strings.Contains(got, `msg=x suppressed`) || !strings.Contains(got, "msg=y suppressed_since_last_line=3\n") || strings.Contains(got, "!BADKEY") {
		t.Errorf("log:\n%s", got)
	}
}
