package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// TestLiveWatchStoppedWatcher: the fsnotify watcher's channels close (its
// reader ended). Watch returned nil at once, so the file was no longer
// reloaded on change and nothing said so. It must say so (ErrWatch) and
// go on reloading the file.
func TestLiveWatchStoppedWatcher(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T, reread time.Duration) (*Live, <-chan watchReport) {
		t.Helper()
		l, _, _ := newLinkedLive(t)
		l.pollEvery, l.rereadEvery = 20*time.Millisecond, reread
		reports := startWatch(t, l, func(w *fsnotify.Watcher) {
			if err := w.Close(); err != nil { // closes Events and Errors
				t.Error(err)
			}
		})
		// The stop is reported, as a failure of the watcher.
		select {
		case r := <-reports:
			if !errors.Is(r.err, ErrWatch) {
				t.Fatalf("first report %+v, want the watcher's stop as ErrWatch", r)
			}
			t.Logf("reported: %v", r.err)
		case <-time.After(10 * time.Second):
			t.Fatal("the watcher's stop was not reported within 10s")
		}
		return l, reports
	}

	t.Run("file replaced by rename", func(t *testing.T) {
		t.Parallel()
		l, reports := setup(t, time.Hour)
		writeFile(t, l.path, liveV2) // over the link
		waitReload(t, l, reports, 50, "file replaced")
		writeFile(t, l.path, liveV3)
		waitReload(t, l, reports, 70, "file replaced again")
	})

	t.Run("symlink target written in place", func(t *testing.T) {
		t.Parallel()
		l, reports := setup(t, time.Hour)
		target, err := filepath.EvalSymlinks(l.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, []byte(liveV2), 0o600); err != nil {
			t.Fatal(err)
		}
		waitReload(t, l, reports, 50, "target written in place")
	})

	t.Run("link repointed", func(t *testing.T) {
		t.Parallel()
		l, reports := setup(t, time.Hour)
		other := filepath.Join(t.TempDir(), "tenants.yaml")
		writeFile(t, other, liveV2)
		swapSymlink(t, other, l.path)
		waitReload(t, l, reports, 50, "link repointed")
	})

	t.Run("rewrite the stat does not show", func(t *testing.T) {
		t.Parallel()
		// Same inode, size and mtime: only reading the file sees it.
		l, reports := setup(t, 200*time.Millisecond)
		target, err := filepath.EvalSymlinks(l.path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(target)
		if err != nil {
			t.Fatal(err)
		}
		same := strings.Replace(liveV1, "submit_rate: 10", "submit_rate: 20", 1)
		if err := os.WriteFile(target, []byte(same), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(target, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
		waitReload(t, l, reports, 20, "rewrite under the same stat")
	})
}
