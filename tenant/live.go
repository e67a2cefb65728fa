package tenant

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
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
	// pollEvery and rereadEvery, when set (by tests), replace watchPoll
	// and watchReread.
	pollEvery, rereadEvery time.Duration
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

// Watch reloads the config whenever the file changes and reports each
// attempt that found a changed or refused file to report, and each
// failure of the watcher itself as an error wrapping ErrWatch. It returns
// when ctx is done, or at once with ErrNotReloadable for a config with no
// file.
//
// Editors and Kubernetes ConfigMaps replace files by rename or symlink
// swap, so directories are watched rather than the file: the file's own,
// and, when the file is a symlink, the directory of each link it leads
// through and of the file it ends at, so that a target elsewhere
// (tenants.yaml -> /etc/sluice-shared/tenants.yaml) edited in place or
// replaced there is seen. After each change the links are followed again
// and the watched directories follow them.
//
// If the watcher stops (its channels close), Watch reports it as an
// ErrWatch and goes on by polling: it looks at the file, and each link on
// the way, every watchPoll (5s), reloads when what it sees changed, and
// reads the file whatever it sees every watchReread (1 minute).
func (l *Live) Watch(ctx context.Context, report func(changed bool, err error)) error {
	if l.path == "" {
		return ErrNotReloadable
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch tenant config: %w", err)
	}
	defer w.Close()
	dir := filepath.Clean(filepath.Dir(l.path))
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch tenant config directory: %w", err)
	}
	targets := watchTargets{w: w, dir: dir}
	if err := targets.follow(l.path); err != nil {
		report(false, err)
	}
	if l.watching != nil {
		l.watching(w)
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return l.poll(ctx, report, "events")
			}
			if targets.matters(ev.Name) {
				settle.Reset(watchSettle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return l.poll(ctx, report, "errors")
			}
			report(false, fmt.Errorf("%w: %w", ErrWatch, err))
			// Events may have been lost (the kernel's queue overflowed):
			// read the file again rather than miss a change until the
			// next one.
			settle.Reset(watchSettle)
		case <-settle.C:
			// Links first, so that a change to a new target from now on
			// is seen and one made before is read below.
			if err := targets.follow(l.path); err != nil {
				report(false, err)
			}
			if changed, err := l.Reload(); changed || err != nil {
				report(changed, err)
			}
		}
	}
}

// maxLinks bounds the symlinks followed from the tenant file, as the
// kernel's limit (40 on Linux) does; past it the chain is a loop.
const maxLinks = 40

// watchTargets is what Watch watches besides the file's own directory:
// the files the tenant file's symlinks lead to, and their directories.
type watchTargets struct {
	w   *fsnotify.Watcher
	dir string // the tenant file's directory, always watched
	// files are the paths, directory resolved, of each link followed
	// from the tenant file and of the file at the end.
	files map[string]bool
	// dirs are the other directories watched, those of files.
	dirs map[string]bool
}

// matters says whether an event on name may change the config. Only the
// tenant file and its links' targets matter, or for a Kubernetes
// ConfigMap the "..data" symlink swapped in the file's directory; other
// files in these directories (the embedded backend's data, say) may
// change all the time.
func (t *watchTargets) matters(name string) bool {
	name = filepath.Clean(name)
	if t.files[name] {
		return true
	}
	return filepath.Dir(name) == t.dir && strings.HasPrefix(filepath.Base(name), "..")
}

// follow follows the symlinks from path again and watches the
// directories they lead through, no longer watching those they left. A
// link that leads nowhere (yet) is no error: a change to it is seen.
func (t *watchTargets) follow(path string) error {
	files := make(map[string]bool)
	// The file's directory is watched by the name it was given; a target
	// in it, reached by its real name, is known by that name too (one
	// directory watched under two names would get its events under one).
	realDir, err := filepath.EvalSymlinks(t.dir)
	if err != nil {
		realDir = t.dir
	}
	for _, f := range linkChain(path) {
		if filepath.Dir(f) == realDir {
			f = filepath.Join(t.dir, filepath.Base(f))
		}
		files[f] = true
	}
	dirs := make(map[string]bool)
	var errs []error
	for f := range files {
		d := filepath.Dir(f)
		if d == t.dir || dirs[d] {
			continue
		}
		dirs[d] = true
		if t.dirs[d] {
			continue
		}
		if err := t.w.Add(d); err != nil {
			delete(dirs, d)
			errs = append(errs, fmt.Errorf("%w: directory %s of a symlink target: %w", ErrWatch, d, err))
		}
	}
	for d := range t.dirs {
		if !dirs[d] {
			// Fails for a directory removed since (a ConfigMap's old
			// ..<timestamp>): the watch went with it.
			_ = t.w.Remove(d)
		}
	}
	t.files, t.dirs = files, dirs
	return errors.Join(errs...)
}

// linkChain returns path and, while it is a symlink, each path it leads
// to, the last one's directory resolved (a ConfigMap's ..data). It stops
// at a link that leads nowhere.
func linkChain(path string) []string {
	chain := []string{filepath.Clean(path)}
	p := path
	for range maxLinks {
		st, err := os.Lstat(p)
		if err != nil || st.Mode()&os.ModeSymlink == 0 {
			break
		}
		to, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(p), to)
		}
		// The link's directory may itself be reached through links
		// (a ConfigMap's ..data): watch where it is.
		d, err := filepath.EvalSymlinks(filepath.Dir(to))
		if err != nil {
			break
		}
		p = filepath.Join(d, filepath.Base(to))
		chain = append(chain, p)
	}
	return chain
}

// watchPoll is how often Watch looks at the file once its watcher has
// stopped: a stat of each link and of the file, cheap whatever the size.
const watchPoll = 5 * time.Second

// watchReread is how often polling reads the file whatever its stat
// says (a rewrite of the same size within the file system's timestamp
// granularity keeps the stat); a file with the same digest is not parsed.
const watchReread = time.Minute

// poll reloads the file when a stat of it (and of each link on the way)
// changes, once it has held still for watchSettle, after reporting that
// the watcher stopped (its channel named closed). It returns when ctx is
// done.
func (l *Live) poll(ctx context.Context, report func(changed bool, err error), closed string) error {
	every, rereadEvery := cmp.Or(l.pollEvery, watchPoll), cmp.Or(l.rereadEvery, watchReread)
	reload := func() {
		if changed, err := l.Reload(); changed || err != nil {
			report(changed, err)
		}
	}
	// Changes since the watcher's last event may have gone unseen: the
	// file is read before the stop is reported, so that a change made
	// once the report is out is seen by the polling, after it settles,
	// never half written by this first read (a test that wrote the file
	// on the report saw this read find it truncated, now and then).
	seen := stampChain(l.path)
	reload()
	report(false, fmt.Errorf("%w: the file watcher stopped (its %s channel closed); polling %s every %v instead",
		ErrWatch, closed, l.path, every))
	tick := time.NewTicker(every)
	defer tick.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	lastRead := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if now := stampChain(l.path); !slices.EqualFunc(now, seen, fileStamp.same) {
				seen = now
				settle.Reset(watchSettle)
			} else if time.Since(lastRead) >= rereadEvery {
				lastRead = time.Now()
				reload()
			}
		case <-settle.C:
			if now := stampChain(l.path); !slices.EqualFunc(now, seen, fileStamp.same) {
				seen = now // still being written
				settle.Reset(watchSettle)
				continue
			}
			lastRead = time.Now()
			reload()
		}
	}
}

// fileStamp is what a stat says of one file.
type fileStamp struct {
	path string
	fi   os.FileInfo // nil if the stat failed
}

func (a fileStamp) same(b fileStamp) bool {
	if a.path != b.path || (a.fi == nil) != (b.fi == nil) {
		return false
	}
	return a.fi == nil || os.SameFile(a.fi, b.fi) && a.fi.Size() == b.fi.Size() &&
		a.fi.ModTime().Equal(b.fi.ModTime()) && a.fi.Mode() == b.fi.Mode()
}

// stampChain stats path's link chain, each link and the file it ends at.
func stampChain(path string) []fileStamp {
	chain := linkChain(path)
	stamps := make([]fileStamp, len(chain))
	for i, p := range chain {
		fi, err := os.Lstat(p)
		if err != nil {
			fi = nil
		}
		stamps[i] = fileStamp{path: p, fi: fi}
	}
	return stamps
}
