package tenant

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchReport is one call of Watch's report.
type watchReport struct {
	changed bool
	err     error
}

// startWatch runs l.Watch until the test ends and returns its reports,
// once Watch watches (a change from then on is seen). onWatching, if not
// nil, runs with the watcher first.
func startWatch(t *testing.T, l *Live, onWatching func(*fsnotify.Watcher)) <-chan watchReport {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	reports := make(chan watchReport, 100)
	watching := make(chan struct{})
	l.watching = func(w *fsnotify.Watcher) {
		if onWatching != nil {
			onWatching(w)
		}
		close(watching)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := l.Watch(ctx, func(changed bool, err error) { reports <- watchReport{changed, err} }); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not start watching within 10s")
	}
	return reports
}

// waitReload waits up to 10s for a report of a changed config, failing on
// a refused file, and checks that acme's submit_rate is then want.
// Watcher failures (ErrWatch) are skipped.
func waitReload(t *testing.T, l *Live, reports <-chan watchReport, want float64, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-reports:
			if errors.Is(r.err, ErrWatch) {
				continue
			}
			if r.err != nil || !r.changed {
				t.Fatalf("%s: report changed=%v err=%v, want a reload", what, r.changed, r.err)
			}
			if got := submitRate(t, l); got != want {
				t.Fatalf("%s: submit_rate %g, want %g", what, got, want)
			}
			return
		case <-deadline:
			t.Fatalf("%s: no reload within 10s (submit_rate still %g)", what, submitRate(t, l))
		}
	}
}

// newLinkedLive returns a Live on link, a symlink in a directory of its
// own to target, a file holding liveV1 in another directory (as a
// ConfigMap mount or a deployment's link to a release).
func newLinkedLive(t *testing.T) (l *Live, link, target string) {
	t.Helper()
	link = filepath.Join(t.TempDir(), "tenants.yaml")
	target = filepath.Join(t.TempDir(), "tenants.yaml")
	writeFile(t, target, liveV1)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	l, err := NewLive(link, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, link, target
}
