package node

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/topology"
)

// TestStartLogTellsANewStore: the embedded store's start-up log tells a
// store this start made from one the host had. A data directory that did
// not exist (its parents neither, or a volume not mounted) was created in
// silence, both starts logged only "embedded store open", and 50 jobs
// submitted while the volume was unmounted were hidden under the
// mountpoint once it was mounted again (found by a tester). A new
// directory, or a new store in an existing one, is a warning naming the
// path; an existing store is the info line, with the messages it holds.
func TestStartLogTellsANewStore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// prepare makes what the start finds in root, and returns the
		// --data-dir to give.
		prepare func(t *testing.T, root string) string
		// makeFirst calls MakeDataDir before OpenBackend, as the gateway
		// does before it writes its keys.
		makeFirst bool
		want      string // the warning, "" for none
		messages  int
	}{
		{
			"missing directory and parents", func(t *testing.T, root string) string { return filepath.Join(root, "vol", "data") }, false,
			`level=WARN msg="created a new, empty data directory and store in it: if this host had jobs before, stop now: is the volume mounted, and is --data-dir right?" path=%s/vol/data`, 0,
		},
		{
			"missing directory made before the keys", func(t *testing.T, root string) string { return filepath.Join(root, "data") }, true,
			`level=WARN msg="created a new, empty data directory and store in it: if this host had jobs before, stop now: is the volume mounted, and is --data-dir right?" path=%s/data`, 0,
		},
		{
			"empty directory (a mountpoint)", func(t *testing.T, root string) string { return root }, false,
			`level=WARN msg="created a new, empty store: if this host had jobs before, stop now: is the volume mounted, and is --data-dir right?" path=%s/queues.db`, 0,
		},
		{"directory with keys only", func(t *testing.T, root string) string {
			if _, err := SecretFile(filepath.Join(root, "admin-key"), "sk_admin_"); err != nil {
				t.Fatal(err)
			}
			return root
		}, true, `level=WARN msg="created a new, empty store: if this host had jobs before, stop now: is the volume mounted, and is --data-dir right?" path=%s/queues.db`, 0},
		{"existing store", func(t *testing.T, root string) string {
			b, err := OpenBackend(t.Context(), BackendFlags{Kind: "embedded", DataDir: root}, topology.Default(), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			q := topology.Default().Names()[0]
			for i := range 3 {
				if _, err := b.Send(t.Context(), &queue.SendParams{Queue: q, Entries: []queue.SendEntry{{ID: "1", Body: fmt.Appendf(nil, "job %d", i)}}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			return root
		}, false, "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			f := BackendFlags{Kind: "embedded", DataDir: tt.prepare(t, root)}
			if tt.makeFirst {
				if err := f.MakeDataDir(); err != nil {
					t.Fatal(err)
				}
			}
			var logs syncbuf.Buffer
			b, err := OpenBackend(t.Context(), f, topology.Default(), slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			log := logs.String()
			if want := fmt.Sprintf(tt.want, root); tt.want != "" && !strings.Contains(log, want+"\n") {
				t.Errorf("log:\n%s\nwant the warning %s", log, want)
			}
			if tt.want == "" && strings.Contains(log, "level=WARN") {
				t.Errorf("log:\n%s\nwant no warning for an existing store", log)
			}
			open := fmt.Sprintf(`level=INFO msg="embedded store open" path=%s messages=%d fsync=always`, filepath.Join(f.DataDir, "queues.db"), tt.messages)
			if !strings.Contains(log, open+" took=") {
				t.Errorf("log:\n%s\nwant %s", log, open)
			}
			if _, err := os.Stat(f.DataDir); err != nil {
				t.Errorf("data directory: %v", err)
			}
		})
	}
}
