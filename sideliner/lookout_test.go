package sideliner

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestLookout(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type saw struct {
		ms           int
		tenant       string
		held, budget int
	}
	tests := []struct {
		name  string
		saws  []saw
		at    int // ms of the Quiet call
		quiet bool
	}{
		{"nothing seen", nil, 0, false},
		{"a tenant with room, neither low nor full", []saw{{0, "a", 50, 100}}, 200, false},
		{"a quiet tenant's job", []saw{{0, "q", 0, 100}}, 200, true},
		{"held under a quarter of the budget", []saw{{0, "q", 24, 100}}, 200, true},
		{"a quarter of the budget is not low", []saw{{0, "q", 25, 100}}, 200, false},
		{"small budgets: only none held is low", []saw{{0, "q", 0, 3}, {0, "r", 1, 3}}, 200, true},
		{"quiet within the window", []saw{{0, "q", 0, 100}}, 10_000, true},
		{"quiet no more past the window", []saw{{0, "q", 0, 100}}, 10_001, false},
		{"a flood: low at first, then full", []saw{{0, "n", 0, 100}, {50, "n", 100, 100}}, 200, false},
		{"every tenant full: a backlog", []saw{{0, "a", 0, 10}, {0, "b", 0, 10}, {10, "a", 10, 10}, {20, "b", 12, 10}}, 200, false},
		{"one of them crowded out", []saw{{0, "a", 10, 10}, {0, "b", 10, 10}, {500, "b", 1, 10}, {600, "a", 20, 10}}, 700, true},
		{"crowded out, then full again", []saw{{0, "b", 10, 10}, {500, "b", 1, 10}, {600, "b", 10, 10}}, 700, false},
		{"low for a moment, then not short", []saw{{0, "b", 100, 100}, {500, "b", 10, 100}, {600, "b", 30, 100}}, 700, false},
		{"a quiet tenant stays quiet", []saw{{0, "q", 0, 100}, {300, "q", 1, 100}, {600, "q", 0, 100}}, 700, true},
		{"a new flood beside a quiet tenant", []saw{{0, "q", 0, 100}, {10, "n", 0, 100}, {20, "n", 100, 100}}, 200, true},
		{"a new quiet tenant after a look", []saw{{0, "a", 10, 10}, {150, "q", 0, 10}}, 160, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Lookout
			for _, s := range tt.saws {
				full := l.Saw(at(s.ms), s.tenant, s.held, s.budget)
				if want := s.held >= s.budget; full != want {
					t.Errorf("Saw(%s, held %d of %d) = %v, want %v", s.tenant, s.held, s.budget, full, want)
				}
			}
			if got := l.Quiet(at(tt.at)); got != tt.quiet {
				t.Errorf("Quiet at %dms = %v, want %v", tt.at, got, tt.quiet)
			}
		})
	}
}

// TestLookoutFloodAtOnce: a new flood is quiet while it holds few jobs
// and not once its read-ahead is full, at once.
func TestLookoutFloodAtOnce(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var l Lookout
	l.Saw(t0, "n", 0, 10)
	if !l.Quiet(t0) {
		t.Error("a tenant holding none is not quiet")
	}
	l.Saw(t0.Add(time.Millisecond), "n", 10, 10)
	if l.Quiet(t0.Add(time.Millisecond)) {
		t.Error("the flood still counts as quiet once its read-ahead is full")
	}
}

// TestLookoutForgets: sightings older than the window are dropped, so
// the tenants seen once do not pile up.
func TestLookoutForgets(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	l := Lookout{Window: time.Second}
	for i := range 1000 {
		l.Saw(t0, string(rune('a'+i%26))+string(rune(i)), 0, 10)
	}
	l.Saw(t0.Add(2*time.Second), "last", 10, 10)
	if len(l.tenants) != 1 || l.quiet != 0 {
		t.Fatalf("%d sightings kept after the window (%d quiet), want 1 (the last, full)", len(l.tenants), l.quiet)
	}
}

func BenchmarkLookoutSaw(b *testing.B) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var l Lookout
	tenants := make([]string, 100)
	for i := range tenants {
		tenants[i] = string(rune('a' + i))
	}
	for i := 0; b.Loop(); i++ {
		l.Saw(t0.Add(time.Duration(i)*time.Microsecond), tenants[i%len(tenants)], i%12, 10)
	}
}

// TestLookoutCountMatches: after any sequence of sightings, the count of
// quiet tenants matches the sightings kept, and Quiet agrees with a look
// through them.
func TestLookoutCountMatches(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(1, 2))
	l := Lookout{Window: time.Second}
	now := t0
	for i := range 20000 {
		now = now.Add(time.Duration(r.IntN(5)) * time.Millisecond)
		tenant := string(rune('a' + r.IntN(20)))
		l.Saw(now, tenant, r.IntN(14), 10)
		want := 0
		for _, s := range l.tenants {
			if s.quiet() {
				want++
			}
		}
		if l.quiet != want {
			t.Fatalf("after %d sightings: count %d, want %d", i+1, l.quiet, want)
		}
		if got := l.Quiet(now); got != (want > 0) && now.Sub(l.swept) == 0 {
			t.Fatalf("after %d sightings: Quiet %v with %d quiet sightings", i+1, got, want)
		}
	}
}
