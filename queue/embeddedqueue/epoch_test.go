package embeddedqueue

import (
	"path/filepath"
	"testing"
)

// TestEpochIsDrawnAtEveryOpen: each Open starts a random epoch, also when
// the log held nothing to replay. A log file is written again from its
// start without being cleared, so the bytes of older records, and of the
// message bodies they carry, stay after the new ones. With epochs counted
// from zero, a body holding a well-formed record of a coming epoch, with
// its CRC, was replayed after a crash when a real record of that epoch
// happened to end where the forged one began: a tenant could inject a
// message nobody sent (found in review, and reproduced with a crash copy).
// A random epoch cannot be forged.
func TestEpochIsDrawnAtEveryOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "queues.db")
	seen := map[uint64]bool{}
	for range 3 {
		b, err := Open(path, Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if b.epoch < 1<<32 || seen[b.epoch] {
			t.Errorf("epoch %d at Open: want a fresh random one (≥ 2^32); seen %v", b.epoch, seen)
		}
		seen[b.epoch] = true
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
