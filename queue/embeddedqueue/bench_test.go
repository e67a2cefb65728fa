package embeddedqueue

import (
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/queuetest"
)

// BenchmarkEmbedded runs the shared backend benchmarks on a store in a
// temporary directory, in each durability mode. Figures are in
// queuetest.Benchmark and doc.go.
func BenchmarkEmbedded(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			queuetest.Benchmark(b, func(b *testing.B) queue.Backend {
				opts := m.opts
				opts.Logger = quiet
				be, err := Open(filepath.Join(b.TempDir(), "queues.db"), opts)
				if err != nil {
					b.Fatal(err)
				}
				return be
			})
		})
	}
}
