package embeddedqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluice-dev/sluice/internal/periodic"
	"github.com/sluice-dev/sluice/queue"
)

// The store file can be removed from under a running process (rm -rf of
// the data directory, a cleanup job, a volume swapped): the process goes
// on reading and writing the open file, which no path names any more,
// and its jobs are gone when it stops. In a filesystem walkthrough the
// gateway answered OK to 7,000 more jobs after an rm -rf of its data
// directory, said nothing, and started empty after a restart: 5,883
// acknowledged jobs lost. So the store checks every fileCheckEvery that
// its path still names the file it opened. Once it does not, it refuses
// new messages (Send, SendMany: queue.ErrUnavailable, saying why), goes
// on delivering the ones it holds, and at Close writes them back: to the
// path if nothing is there again, else beside it (restoreGoneStore).

// fileCheckEvery is how often the store checks that its path still names
// its file.
const fileCheckEvery = 2 * time.Second

// watchFile checks the store's path until ctx ends, and marks the store
// gone the first time the path no longer names its file.
func (b *Backend) watchFile(ctx context.Context) {
	periodic.Every(ctx, cmp.Or(b.knobs.fileCheckEvery, fileCheckEvery), func(context.Context) {
		if b.gone.Load() != nil {
			return
		}
		fi, err := os.Stat(b.db.Path())
		if err == nil && os.SameFile(fi, b.opened) {
			return
		}
		what := "removed"
		if err == nil {
			what = "replaced by another file"
		}
		gone := fmt.Errorf("%w: the store file %s was %s while this process ran: it takes no new jobs, delivers those it holds, and writes them back when it stops",
			queue.ErrUnavailable, b.db.Path(), what)
		b.gone.Store(&gone)
		b.opts.Logger.Error("the store file was "+what+" while sluice ran (was the data directory deleted or its volume changed?). "+
			"New jobs are refused; the jobs it holds are still delivered from the open file; stop this process normally (SIGTERM, not SIGKILL) and it writes them back",
			slog.String("path", b.db.Path()), slog.Int("messages", b.Messages()))
	})
}

// goneErr returns the error new messages get once the store file is gone,
// or nil.
func (b *Backend) goneErr() error {
	if e := b.gone.Load(); e != nil {
		return *e
	}
	return nil
}

// Messages returns the number of messages the store holds, in every
// queue: waiting, in flight and delayed.
func (b *Backend) Messages() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, q := range b.queues {
		n += q.msgs.len()
	}
	return n
}

// restoreGoneStore writes a consistent copy of the store, committed by the
// writer's last commit, to its path if nothing is there, else beside it,
// once the store file is gone. It runs in Close, before the store closes.
func (b *Backend) restoreGoneStore(lastCommit error) {
	if b.gone.Load() == nil {
		return
	}
	path := b.db.Path()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		path = fmt.Sprintf("%s.recovered-%d", path, time.Now().Unix())
	}
	err := os.MkdirAll(filepath.Dir(path), 0o700)
	if err == nil {
		err = b.db.View(func(tx *bolt.Tx) error { return writeCopy(tx, path) })
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	log := b.opts.Logger.With(slog.String("path", path), slog.Int("messages", b.Messages()))
	switch {
	case err != nil:
		log.Error("could not write back the store whose file was removed; its jobs are lost when this process exits", slog.Any("error", err))
	case lastCommit != nil:
		log.Error("wrote back the store whose file was removed, but its last commit failed: the jobs answered since the commit before are missing from the copy", slog.Any("commit_error", lastCommit))
	case path != b.db.Path():
		log.Warn("wrote back the store whose file was removed beside the file now at its path; to use it, stop sluice and move it there", slog.String("store", b.db.Path()))
	default:
		log.Warn("wrote back the store whose file was removed: the next start finds its jobs (keys in the data directory that were removed with it are made anew)")
	}
}

// writeCopy writes the store as tx sees it to a new file at path, synced.
func writeCopy(tx *bolt.Tx, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := tx.WriteTo(f); err != nil {
		return errors.Join(err, f.Close(), os.Remove(path))
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close(), os.Remove(path))
	}
	return f.Close()
}
