package node

import (
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/topology"
)

func TestFsyncFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		give    []string
		want    time.Duration
		wantErr string
	}{
		{give: nil, want: 0},
		{give: []string{"--fsync=always"}, want: 0},
		{give: []string{"--fsync=interval:10ms"}, want: 10 * time.Millisecond},
		{give: []string{"--fsync", "interval:1s"}, want: time.Second},
		{give: []string{"--fsync=interval:1s", "--fsync=always"}, want: 0},
		{give: []string{"--fsync=sometimes"}, wantErr: `invalid value "sometimes" for flag -fsync: want always or interval:<duration>, such as interval:10ms`},
		{give: []string{"--fsync=interval"}, wantErr: "want always or interval:<duration>"},
		{give: []string{"--fsync=interval:"}, wantErr: `interval "" is not a duration such as 10ms`},
		{give: []string{"--fsync=interval:fast"}, wantErr: `interval "fast" is not a duration such as 10ms`},
		{give: []string{"--fsync=interval:0s"}, wantErr: "interval 0s: want a positive duration"},
		{give: []string{"--fsync=interval:-5ms"}, wantErr: "interval -5ms: want a positive duration"},
		{give: []string{"--fsync=interval:2m"}, wantErr: "interval 2m: want at most 1m"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f BackendFlags
			f.Register(fs)
			err := fs.Parse(tt.give)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case f.SyncInterval != tt.want:
				t.Fatalf("sync interval %s, want %s", f.SyncInterval, tt.want)
			}
		})
	}
}

func FuzzParseFsync(f *testing.F) {
	for _, s := range []string{"always", "interval:10ms", "interval:", "interval:1h", "interval:-1s", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseFsync(s)
		switch {
		case err != nil:
			if d != 0 {
				t.Fatalf("%q: error %v with interval %s", s, err, d)
			}
		case s == "always":
			if d != 0 {
				t.Fatalf("always gave %s", d)
			}
		case d <= 0 || d > time.Minute:
			t.Fatalf("%q accepted as %s", s, d)
		default:
			back, err := ParseFsync(fsyncFlag{&d}.String())
			if err != nil || back != d {
				t.Fatalf("%q: %s does not round-trip: %s, %v", s, d, back, err)
			}
		}
	})
}

// TestStartLogSaysTheDurability: the embedded store's start-up log line
// names its file and the --fsync in force, so the durability an OK means
// can be read off a running process's log.
func TestStartLogSaysTheDurability(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		interval time.Duration
		want     string
	}{{0, "fsync=always"}, {10 * time.Millisecond, "fsync=interval:10ms"}} {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			var logs syncbuf.Buffer
			dir := t.TempDir()
			b, err := OpenBackend(t.Context(), BackendFlags{Kind: "embedded", DataDir: dir, SyncInterval: tt.interval}, topology.Default(), slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			log := logs.String()
			if !strings.Contains(log, `msg="embedded store open"`) || !strings.Contains(log, filepath.Join(dir, "queues.db")) || !strings.Contains(log, " "+tt.want+" took=") {
				t.Errorf("log:\n%s\nwant the line that says the store is open to name its file and %s", log, tt.want)
			}
		})
	}
}
