package dirsync_test

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/sluice-dev/sluice/internal/dirsync"
)

func TestSync(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := dirsync.Sync(dir); err != nil {
		t.Fatalf("sync %s: %v", dir, err)
	}
	if err := dirsync.Sync(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("sync of a missing directory: %v, want ErrNotExist", err)
	}
}
