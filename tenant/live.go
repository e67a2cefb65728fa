package tenant

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Live is the tenant config a running process uses. Reload reads its file
// again and swaps the new config in atomically; a file that does not parse
// or fails the check is refused and the previous config stays. Requests in
// flight keep the *Config they started with.
type Live struct {
	path  string
	check func(*Config) error
	cur   atomic.Pointer[Version]
	mu    sync.Mutex // one reload at a time

	// watching, when set (by tests), is called once Watch watches the
	// directory: a change from then on is seen.
	watching func(*fsnotify.Watcher)
}

// Version is one loaded config and where it came from.
type Version struct {
	Config *Config
	// Path of the file; empty for a config built in the process.
	Path string
	// Digest is the hex SHA-256 of the file's bytes.
	Digest   string
	LoadedAt time.Time
	// LoadTime is how long reading, parsing and checking the file took.
	LoadTime time.Duration

	big bool // from a file of bigFile bytes or more
}

// ErrNotReloadable is returned by Reload for a config with no file.
var ErrNotReloadable = errors.New("the tenant config has no file to reload (start with --tenants)")

// ErrWatch marks what Watch reports of a failure of the file watcher
// itself (events lost to a queue overflow, say): no file was refused,
// and Watch reads the file again.
var ErrWatch = errors.New("watch tenant config")

// NewLive loads path. check, if not nil, runs on every config before it is
// used (the binaries check that each tenant's lane exists).
func NewLive(path string, check func(*Config) error) (*Live, error) {
	l := &Live{path: path, check: check}
	v, err := l.load("")
	if err != nil {
		return nil, err
	}
	l.cur.Store(v)
	if v.big {
		debug.FreeOSMemory() // the parse's garbage
	}
	return l, nil
}

// Fixed returns a Live holding cfg for good.
func Fixed(cfg *Config) *Live {
	l := &Live{}
	l.cur.Store(&Version{Config: cfg, LoadedAt: time.Now()})
	return l
}

// Config returns the current config.
func (l *Live) Config() *Config { return l.cur.Load().Config }

// Version returns the current config with its origin.
func (l *Live) Version() *Version { return l.cur.Load() }

// Reload reads the file again. It returns whether the config changed (a
// file with the same bytes is not reloaded) and, when the new file is
// refused, an error naming the file and line; the previous config stays.
func (l *Live) Reload() (changed bool, err error) {
	if l.path == "" {
		return false, ErrNotReloadable
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	v, err := l.load(l.cur.Load().Digest)
	if err != nil || v == nil {
		return false, err
	}
	l.cur.Store(v)
	if v.big {
		// The old config is garbage now, with the parse's.
		debug.FreeOSMemory()
	}
	return true, nil
}

// bigFile is the size from which a file's parse runs with a lower GC
// target and its garbage is returned to the OS at once.
const bigFile = 1 << 20

// parseGCPercent is the GC target while a big file is parsed.
const parseGCPercent = 10

// load reads, parses and checks the file, or returns nil if its digest
// is unchanged.
//
// Parsing a big file makes garbage several times the size of the config
// it builds. With the default GC target the heap may grow to twice what
// is live, old config included, before a collection, so a reload would
// double the process's memory; a lower target while the parse runs keeps
// the peak near the steady size, for a little more CPU during a rare
// event.
func (l *Live) load(unchanged string) (*Version, error) {
	start := time.Now()
	big := false
	if st, err := os.Stat(l.path); err == nil && st.Size() >= bigFile {
		big = true
		defer debug.SetGCPercent(debug.SetGCPercent(parseGCPercent))
	}
	cfg, sum, err := loadFile(l.path, unchanged)
	if err == nil && cfg == nil {
		return nil, nil
	}
	if err == nil && l.check != nil {
		err = l.check(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("tenant config %s: %w", l.path, err)
	}
	now := time.Now()
	return &Version{Config: cfg, Path: l.path, Digest: sum, LoadedAt: now, LoadTime: now.Sub(start), big: big}, nil
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// watchSettle is how long Watch waits after the last change to the file's
// directory before reloading, so that an editor's or a deployment's
// several writes are read once, complete.
const watchSettle = 250 * time.Millisecond

// Watch reloads the config whenever the file changes (editors and
// Kubernetes ConfigMaps replace files by rename or symlink swap, so the
// directory is watched rather than the file) and reports each attempt that
// found a changed or refused file to report, and each failure of the
// watcher itself as an error wrapping ErrWatch. It returns when ctx is done,
// or at once with ErrNotReloadable for a config with no file.
func (l *Live) Watch(ctx context.Context, report func(changed bool, err error)) error {
	if l.path == "" {
		return ErrNotReloadable
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch tenant config: %w", err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(l.path)); err != nil {
		return fmt.Errorf("watch tenant config directory: %w", err)
	}
	if l.watching != nil {
		l.watching(w)
	}
	// Only the file itself matters, or for a Kubernetes ConfigMap the
	// "..data" symlink swapped over it; other files in the directory (the
	// embedded backend's data, say) may change all the time.
	base := filepath.Base(l.path)
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if name := filepath.Base(ev.Name); name == base || strings.HasPrefix(name, "..") {
				settle.Reset(watchSettle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			report(false, fmt.Errorf("%w: %w", ErrWatch, err))
			// Events may have been lost (the kernel's queue overflowed):
			// read the file again rather than miss a change until the
			// next one.
			settle.Reset(watchSettle)
		case <-settle.C:
			if changed, err := l.Reload(); changed || err != nil {
				report(changed, err)
			}
		}
	}
}
