package node

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
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
