package tenant

import (
	"os"
	"path/filepath"
	"testing"
)

const liveV3 = `tenants:
  - id: acme
    tier: standard
    api_keys: [key-acme]
    submit_rate: 70
`

const liveV4 = `tenants:
  - id: acme
    tier: standard
    api_keys: [key-acme]
    submit_rate: 90
`

// swapSymlink points link at target atomically, by a new link renamed
// over the old one (as ln -sfn does not, and deploy tools do).
func swapSymlink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".new"
	if err := os.Symlink(target, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// TestLiveWatchSymlinkElsewhere: the tenant file is a symlink to a file
// in another directory (tenants.yaml -> /etc/sluice-shared/tenants.yaml),
// and that file is edited there. Only the link's directory was watched,
// so such edits went unseen until a SIGHUP.
func TestLiveWatchSymlinkElsewhere(t *testing.T) {
	t.Parallel()

	t.Run("target written in place", func(t *testing.T) {
		t.Parallel()
		l, _, target := newLinkedLive(t)
		reports := startWatch(t, l, nil)
		if err := os.WriteFile(target, []byte(liveV2), 0o600); err != nil {
			t.Fatal(err)
		}
		waitReload(t, l, reports, 50, "target written in place")
	})

	t.Run("target replaced by rename", func(t *testing.T) {
		t.Parallel()
		l, _, target := newLinkedLive(t)
		reports := startWatch(t, l, nil)
		writeFile(t, target, liveV2)
		waitReload(t, l, reports, 50, "target replaced by rename")
	})

	t.Run("link repointed, then the new target edited", func(t *testing.T) {
		t.Parallel()
		l, link, _ := newLinkedLive(t)
		reports := startWatch(t, l, nil)
		other := filepath.Join(t.TempDir(), "tenants.yaml")
		writeFile(t, other, liveV2)
		swapSymlink(t, other, link)
		waitReload(t, l, reports, 50, "link repointed")
		// The new target's directory is watched from now on.
		if err := os.WriteFile(other, []byte(liveV3), 0o600); err != nil {
			t.Fatal(err)
		}
		waitReload(t, l, reports, 70, "new target written in place")
	})

	t.Run("chain of links", func(t *testing.T) {
		t.Parallel()
		// tenants.yaml -> mid/current.yaml -> v1/tenants.yaml: repointing
		// the middle link, in a third directory, is a change too.
		l, link, target := newLinkedLive(t)
		mid := filepath.Join(t.TempDir(), "current.yaml")
		if err := os.Symlink(target, mid); err != nil {
			t.Fatal(err)
		}
		swapSymlink(t, mid, link)
		if _, err := l.Reload(); err != nil {
			t.Fatal(err)
		}
		reports := startWatch(t, l, nil)
		other := filepath.Join(t.TempDir(), "tenants.yaml")
		writeFile(t, other, liveV2)
		swapSymlink(t, other, mid)
		waitReload(t, l, reports, 50, "middle link repointed")
		if err := os.WriteFile(other, []byte(liveV3), 0o600); err != nil {
			t.Fatal(err)
		}
		waitReload(t, l, reports, 70, "new final target written in place")
	})
}

// TestLiveWatchConfigMap: a Kubernetes ConfigMap volume. The file is
// tenants.yaml -> ..data/tenants.yaml, ..data -> ..<timestamp>, and an
// update writes a new ..<timestamp> directory, swaps ..data over to it by
// rename and removes the old directory.
func TestLiveWatchConfigMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	update := func(ts, content string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, ts), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ts, "tenants.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		old, _ := os.Readlink(filepath.Join(dir, "..data"))
		swapSymlink(t, ts, filepath.Join(dir, "..data"))
		if old != "" {
			if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
				t.Fatal(err)
			}
		}
	}
	update("..2024_01_01_00_00_00.1", liveV1)
	path := filepath.Join(dir, "tenants.yaml")
	if err := os.Symlink(filepath.Join("..data", "tenants.yaml"), path); err != nil {
		t.Fatal(err)
	}
	l, err := NewLive(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	reports := startWatch(t, l, nil)
	update("..2024_01_01_00_01_00.2", liveV2)
	waitReload(t, l, reports, 50, "first update")
	update("..2024_01_01_00_02_00.3", liveV3)
	waitReload(t, l, reports, 70, "second update")
}

// TestLiveWatchSymlinkSameDirViaLinkedDir: the file's directory is reached
// through a link (/etc/sluice -> /opt/sluice) and the file links to another
// file there; rewriting either is seen.
func TestLiveWatchSymlinkSameDirViaLinkedDir(t *testing.T) {
	t.Parallel()
	realDir := t.TempDir()
	dir := filepath.Join(t.TempDir(), "sluice")
	if err := os.Symlink(realDir, dir); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(realDir, "tenants-v1.yaml"), liveV1)
	path := filepath.Join(dir, "tenants.yaml")
	if err := os.Symlink("tenants-v1.yaml", path); err != nil {
		t.Fatal(err)
	}
	l, err := NewLive(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	reports := startWatch(t, l, nil)
	if err := os.WriteFile(filepath.Join(realDir, "tenants-v1.yaml"), []byte(liveV2), 0o600); err != nil {
		t.Fatal(err)
	}
	waitReload(t, l, reports, 50, "target written in place")
	writeFile(t, filepath.Join(dir, "tenants-v2.yaml"), liveV3)
	swapSymlink(t, "tenants-v2.yaml", path)
	waitReload(t, l, reports, 70, "link repointed")
	if err := os.WriteFile(filepath.Join(dir, "tenants-v2.yaml"), []byte(liveV4), 0o600); err != nil {
		t.Fatal(err)
	}
	waitReload(t, l, reports, 90, "new target written in place")
}
