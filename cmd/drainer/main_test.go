package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/flagconf/flagconftest"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// TestStopDuringStartIsClean: a stop signal during start-up (ctx ends
// before the drainer is up) ends it with no error. The start-up work under
// way failed with ctx, and the drainer exited with status 1 and a
// "context canceled" error, a failure to whatever supervises it, for the
// stop it was asked for (found in review).
func TestStopDuringStartIsClean(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := run(ctx, []string{"--data-dir", t.TempDir(), "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, io.Discard)
	if err != nil {
		t.Fatalf("run: %v, want no error", err)
	}
}

// TestDurationFlagsSayWhatToWrite: every duration flag (those --help
// lists as "duration") refuses a number without a unit by saying what to
// write. --shutdown-grace 3 said "parse error", where
// SLUICE_SHUTDOWN_GRACE=3 said what was wanted (found in a walkthrough).
func TestDurationFlagsSayWhatToWrite(t *testing.T) {
	t.Parallel()
	var help strings.Builder
	if err := run(t.Context(), []string{"--help"}, nil, &help); err != nil {
		t.Fatalf("--help: %v", err)
	}
	flags := flagconftest.DurationFlags(help.String())
	if len(flags) < 7 {
		t.Fatalf("--help lists %d duration flags (%q), want the drainer's seven or more:\n%s", len(flags), flags, help.String())
	}
	flagconftest.CheckBadDurations(t, flags, func(f, value string) error {
		return run(t.Context(), []string{"--data-dir", t.TempDir(), "--" + f, value}, nil, io.Discard)
	})
}

// TestShortAdminKeyRefusedAtStart: an admin key shorter than 8
// characters, given or in <data-dir>/admin-key, fails the start, saying
// where it came from. It was taken, where tenant and worker keys that
// short are refused (found in a walkthrough).
func TestShortAdminKeyRefusedAtStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, flag, file, want string
	}{
		{"flag", "short", "", "--admin-key (on the command line, or admin-key: in the --config file) is 5 characters"},
		{"file", "", "short\n", "admin-key holds a key of 5 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tt.file != "" {
				if err := os.WriteFile(filepath.Join(dir, "admin-key"), []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var logs strings.Builder
			err := run(t.Context(), []string{"--data-dir", dir, "--admin-key", tt.flag, "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, &logs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(logs.String(), "listening") {
				t.Errorf("something listened before the start failed:\n%s", logs.String())
			}
		})
	}
}

// TestMisspelledEnvironmentIsNamed: a SLUICE_* variable a letter or two
// from a setting is named in the log with the one meant, before anything
// else can fail; sluicectl's variables are not the drainer's mistakes.
func TestMisspelledEnvironmentIsNamed(t *testing.T) {
	t.Setenv("SLUICE_SHUTDOWN_GRAC", "10s")
	t.Setenv("SLUICE_API_KEY", "k")
	t.Setenv("SLUICE_ADDR", "127.0.0.1:7070")
	var logs strings.Builder
	err := run(t.Context(), []string{"--data-dir", t.TempDir(), "--queues", filepath.Join(t.TempDir(), "missing.yaml")}, nil, &logs)
	if err == nil {
		t.Fatal("run with a missing --queues file: no error")
	}
	want := "environment variable SLUICE_SHUTDOWN_GRAC sets nothing: drainer has no such setting; did you mean SLUICE_SHUTDOWN_GRACE?"
	if !strings.Contains(logs.String(), want) || strings.Contains(logs.String(), "SLUICE_API_KEY") || strings.Contains(logs.String(), "SLUICE_ADDR") {
		t.Errorf("log:\n%s\nwant one warning: %s", logs.String(), want)
	}
}

// TestConsoleTLSRefusedAtStart: console TLS flags that cannot serve (no
// --console-listen, a certificate that is not there) fail the start,
// naming the flag, before anything listens.
func TestConsoleTLSRefusedAtStart(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no --console-listen", []string{"--console-tls-cert", pki.ServerCert, "--console-tls-key", pki.ServerKey}, "add --console-listen"},
		{"missing files", []string{"--console-listen", "127.0.0.1:0", "--console-tls-cert", pki.ServerCert + ".gone", "--console-tls-key", pki.ServerKey}, "--console-tls-cert/--console-tls-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			args := append([]string{"--data-dir", t.TempDir(), "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, tt.args...)
			err := run(t.Context(), args, nil, &logs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(logs.String(), "listening") {
				t.Errorf("something listened before the start failed:\n%s", logs.String())
			}
		})
	}
}
