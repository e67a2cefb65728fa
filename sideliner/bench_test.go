package sideliner

import (
	"testing"
	"time"
)

// BenchmarkDecide-2         	27929082	        43.45 ns/op	       0 B/op	       0 allocs/op
func BenchmarkDecide(b *testing.B) {
	p := Policy{StalenessBound: 5 * time.Minute}
	in := Input{Now: t0, Source: SourceSpillover, EnqueuedAt: t0.Add(-time.Minute), ReceiveCount: 2, ReadAheadFull: true, Jitter: 0.3}
	b.ReportAllocs()
	for b.Loop() {
		if p.Decide(in).Action != Defer {
			b.Fatal("want defer")
		}
	}
}
