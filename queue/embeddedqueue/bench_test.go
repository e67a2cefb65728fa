package embeddedqueue

import (
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/queuetest"
)

// BenchmarkEmbedded runs the shared backend benchmarks on a store in a
// temporary directory. Figures are in queuetest.Benchmark and doc.go.
func BenchmarkEmbedded(b *testing.B) {
	queuetest.Benchmark(b, func(b *testing.B) queue.Backend {
		be, err := Open(filepath.Join(b.TempDir(), "queues.db"), Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		return be
	})
}
