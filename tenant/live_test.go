package tenant

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

const liveV1 = `tenants:
  - id: acme
    tier: standard
    api_keys: [key-acme]
    submit_rate: 10
`

const liveV2 = `tenants:
  - id: acme
    tier: standard
    api_keys: [key-acme, key-acme-2]
    submit_rate: 50
`

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as editors and deploy tools do
		t.Fatal(err)
	}
}

func submitRate(t *testing.T, l *Live) float64 {
	t.Helper()
	acme, ok := l.Config().Tenant("acme")
	if !ok {
		t.Fatal("tenant acme missing")
	}
	return acme.Limits.SubmitRate
}

func TestLiveReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	writeFile(t, path, liveV1)
	l, err := NewLive(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := l.Version()

	// Same bytes: nothing to do.
	if changed, err := l.Reload(); changed || err != nil {
		t.Fatalf("reload of an unchanged file: changed=%v err=%v", changed, err)
	}

	writeFile(t, path, liveV2)
	if changed, err := l.Reload(); !changed || err != nil {
		t.Fatalf("reload: changed=%v err=%v", changed, err)
	}
	if got := submitRate(t, l); got != 50 {
		t.Fatalf("submit_rate %g after reload, want 50", got)
	}
	if _, ok := l.Config().Authenticate("key-acme-2"); !ok {
		t.Fatal("key added by the reload does not authenticate")
	}
	if v := l.Version(); v.Digest == first.Digest || v.Path != path {
		t.Fatalf("version not updated: %+v", v)
	}
	// A request that started before the reload still holds the old config.
	if acme, _ := first.Config.Tenant("acme"); acme.Limits.SubmitRate != 10 {
		t.Fatal("the previous config changed under its holder")
	}
}

func TestLiveReloadRefusesBadFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content, want string
	}{
		{"syntax", "tenants:\n  - id: acme\n    tier: [\n", "line 3"},
		{"unknown field", "tenants:\n  - id: acme\n    tier: standard\n    api_keys: [key-acme]\n    submit_rte: 5\n", "line 5"},
		{"bad value", "tenants:\n  - id: acme\n    tier: standard\n    api_keys: [key-acme]\n    submit_rate: -1\n", "submit_rate must be positive"},
		{"check", "tenants:\n  - id: acme\n    tier: standard\n    api_keys: [key-acme]\n    lane: nowhere\n", "lane nowhere"},
		// A file truncated by a tool that writes in place, caught before
		// its new content: refused with "EOF" alone (found in review).
		{"empty", "", "the file is empty"},
		{"only comments", "# tenants moved\n", "the file is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "tenants.yaml")
			writeFile(t, path, liveV1)
			check := func(c *Config) error {
				for _, tn := range c.Tenants() {
					if tn.Limits.Lane == "nowhere" {
						return errors.New("lane nowhere does not exist")
					}
				}
				return nil
			}
			l, err := NewLive(path, check)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, tt.content)
			changed, err := l.Reload()
			if changed || err == nil {
				t.Fatalf("bad file accepted: changed=%v", changed)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q should name %s and say %q", err, path, tt.want)
			}
			if got := submitRate(t, l); got != 10 {
				t.Fatalf("old config lost: submit_rate %g", got)
			}
		})
	}
}

func TestLiveRefusesBadFileAtStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	writeFile(t, path, "tenants:\n  - id: acme\n    tier: gold\n    api_keys: [key-acme]\n")
	_, err := NewLive(path, nil)
	if err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), "gold") {
		t.Fatalf("err = %v, want the line and the unknown tier", err)
	}
}

func TestLiveWatch(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	writeFile(t, path, liveV1)
	l, err := NewLive(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	type report struct {
		changed bool
		err     error
	}
	reports := make(chan report, 10)
	watching := make(chan struct{})
	l.watching = func(*fsnotify.Watcher) { close(watching) }
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := l.Watch(ctx, func(changed bool, err error) { reports <- report{changed, err} }); err != nil {
			t.Error(err)
		}
	})
	defer func() { cancel(); wg.Wait() }()

	next := func() report {
		t.Helper()
		select {
		case r := <-reports:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no reload within 10s of a change")
			return report{}
		}
	}
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not start watching within 10s")
	}
	// Other files in the directory changing all the time do not hold the
	// reload back.
	noise := filepath.Join(filepath.Dir(path), "data.db")
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = os.WriteFile(noise, []byte(time.Now().String()), 0o600)
			time.Sleep(20 * time.Millisecond)
		}
	})
	writeFile(t, path, liveV2)
	if r := next(); !r.changed || r.err != nil {
		t.Fatalf("first change: %+v", r)
	}
	if got := submitRate(t, l); got != 50 {
		t.Fatalf("submit_rate %g, want 50", got)
	}
	writeFile(t, path, "tenants: [")
	if r := next(); r.changed || r.err == nil {
		t.Fatalf("bad file: %+v", r)
	}
	if got := submitRate(t, l); got != 50 {
		t.Fatalf("bad file replaced the config: submit_rate %g", got)
	}
}

func TestFixedIsNotReloadable(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	l := Fixed(cfg)
	if _, err := l.Reload(); !errors.Is(err, ErrNotReloadable) {
		t.Fatalf("Reload = %v", err)
	}
	if l.Config() != cfg {
		t.Fatal("Config is not the fixed one")
	}
}

// TestLiveWatchErrorRereads: a watcher error can mean lost events (the
// kernel's queue overflowed), so Watch reads the file again. Before, a
// change whose event was lost went unseen until the next change.
func TestLiveWatchErrorRereads(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	writeFile(t, path, liveV1)
	l, err := NewLive(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, liveV2) // changed with no watcher to see it: a lost event
	l.watching = func(w *fsnotify.Watcher) {
		go func() { w.Errors <- fsnotify.ErrEventOverflow }() // read once Watch loops
	}
	ctx, cancel := context.WithCancel(t.Context())
	reloaded := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := l.Watch(ctx, func(changed bool, err error) {
			// The watcher's own failure is told apart from a refused
			// file, which it is not: reported as one, it was logged
			// "tenant config refused" and counted as a refused reload.
			if err != nil && !errors.Is(err, ErrWatch) {
				t.Errorf("watcher error reported as %v, want ErrWatch", err)
			}
			if changed {
				reloaded <- struct{}{}
			}
		}); err != nil {
			t.Error(err)
		}
	})
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-reloaded:
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10s of a watcher error")
	}
	if got := submitRate(t, l); got != 50 {
		t.Fatalf("submit_rate %g, want 50", got)
	}
}
