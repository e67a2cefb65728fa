package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/flagconf/flagconftest"
	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/internal/tlsflags/tlstest"
)

// TestParseRefusesBadValues: flag values that crashed the gateway or
// quietly turned a guarantee off are refused at start, naming the flag
// (found in review): a negative console sample interval panicked once the
// console served; a negative idempotency window let every retry make a
// new job; a shutdown grace of zero or less cut calls at once and failed
// every clean stop.
func TestParseRefusesBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct{ flag, want string }{
		{"--console-sample-interval=-1s", "--console-sample-interval"},
		{"--console-sample-interval=0s", "--console-sample-interval"},
		{"--idempotency-window=-1s", "--idempotency-window"},
		// 0 (meant as "no deduplication") became the 10m default
		// without a word (found in review).
		{"--idempotency-window=0s", "--idempotency-window"},
		{"--shutdown-grace=0s", "--shutdown-grace"},
		{"--shutdown-grace=-1s", "--shutdown-grace"},
		{"--max-attempts=0", "--max-attempts"},
		{"--sideline-share=150", "--sideline-share"},
		{"--read-ahead=-1", "--read-ahead"},
		{"--worker-lease-timeout=-1s", "--worker-lease-timeout"},
		{"--handler-timeout=0s", "--handler-timeout"},
		// The retry flags were refused as "sideliner policy: retry cap
		// must not be … above 15m0s", naming no flag (found in review).
		{"--retry-cap=20m", "--retry-cap"},
		{"--retry-cap=-1s", "--retry-cap"},
		{"--retry-base=-1s", "--retry-base"},
		{"--retry-base=16m", "--retry-base"},
		// 0 was taken as the default, 2s or 15m, where the messages
		// said "must be positive" (found in review).
		{"--retry-cap=0s", "--retry-cap"},
		{"--retry-base=0s", "--retry-base"},
		// A negative depth interval was taken as the embedded default,
		// 1s, also on SQS, where its default is 10s and each read is a
		// billed call per queue (found in review).
		{"--depth-interval=-10s", "--depth-interval"},
		// --worker-tls-* only dial --worker-addr; without it they were
		// ignored, and the pull-worker listener an operator meant to
		// secure with them stayed plaintext (found in review).
		{"--worker-tls-cert=client.pem", "--worker-tls-cert"},
		{"--worker-tls", "--worker-tls"},
		{"--worker-tls-ca=ca.pem", "--tls-cert"},
		// 0 became the 1m default, and a value under 1s was refused
		// by the publisher as "cloudwatchpub: Interval 500ms is under
		// 1s", naming no flag, once the store was open (found in review).
		{"--cloudwatch-namespace=sluice --cloudwatch-interval=0s", "--cloudwatch-interval"},
		{"--cloudwatch-namespace=sluice --cloudwatch-interval=500ms", "--cloudwatch-interval"},
		// SQS keeps a message invisible for at most 12h in all: a
		// longer delivery lost its lease and went to another worker
		// while it still ran.
		{"--backend=sqs --handler-timeout=13h", "--handler-timeout"},
		// The console cannot serve TLS on the admin gRPC listener.
		{"--console-tls-cert=c.pem --console-tls-key=k.pem", "add --console-listen"},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			t.Parallel()
			_, err := parse(append([]string{"--data-dir", t.TempDir()}, strings.Fields(tt.flag)...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parse(%s): %v, want an error naming %s", tt.flag, err, tt.want)
			}
		})
	}
	if _, err := parse([]string{"--data-dir", t.TempDir(), "--console=false", "--console-sample-interval=0s"}, io.Discard); err != nil {
		t.Errorf("the console off: %v, want accepted", err)
	}
	if _, err := parse([]string{"--data-dir", t.TempDir(), "--handler-timeout=13h"}, io.Discard); err != nil {
		t.Errorf("a 13h handler timeout on the embedded backend: %v, want accepted", err)
	}
}

// TestStartFailsBeforeServing: a part of the drainers' set-up that fails
// (here the admin key's file cannot be made) fails the start before the
// ingest API listens. It failed after, and returned with that server
// still serving while the gateway stopped under it (found in review).
func TestStartFailsBeforeServing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "admin-key"), 0o700); err != nil { // a directory where the key file goes
		t.Fatal(err)
	}
	var logs strings.Builder
	err := run(t.Context(), []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, io.Discard, &logs)
	if err == nil || !strings.Contains(err.Error(), "admin-key") {
		t.Fatalf("run: %v, want an error naming the admin key's file", err)
	}
	if strings.Contains(logs.String(), "gateway listening") {
		t.Errorf("the ingest API listened before the start failed:\n%s", logs.String())
	}
}

// TestConsoleTLSRefusedAtStart: console TLS flags that cannot serve (no
// --console-listen, a key without its certificate, files that are not
// there) fail the start, naming the flag, before anything listens, not
// when the first browser connects.
func TestConsoleTLSRefusedAtStart(t *testing.T) {
	t.Parallel()
	pki := tlstest.New(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no --console-listen", []string{"--console-tls-cert", pki.ServerCert, "--console-tls-key", pki.ServerKey}, "add --console-listen"},
		{"key without certificate", []string{"--console-listen", "127.0.0.1:0", "--console-tls-key", pki.ServerKey}, "--console-tls-cert and --console-tls-key go together"},
		{"missing files", []string{"--console-listen", "127.0.0.1:0", "--console-tls-cert", pki.ServerCert + ".gone", "--console-tls-key", pki.ServerKey}, "--console-tls-cert/--console-tls-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs strings.Builder
			args := append([]string{"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, tt.args...)
			err := run(t.Context(), args, nil, io.Discard, &logs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(logs.String(), "listening") {
				t.Errorf("something listened before the start failed:\n%s", logs.String())
			}
		})
	}
}

// TestWorkerAddrIsNotOwnPullListener: a push target that is this
// process's own pull-worker listener is refused, naming both flags, and
// the environment variable when it came from there, with the one to set
// instead. SLUICE_WORKER_ADDR was what sluicectl worker read as the pull
// address to connect to (now SLUICE_PULL_ADDR; the old name is still read
// when that is unset), and the gateway reads it as --worker-addr:
// exported for the one, it turned the other into a push gateway that sent
// every job to its own (then closed) pull address, retried and
// dead-lettered them, and served no pull worker. (Not parallel: it sets
// the environment.)
func TestWorkerAddrIsNotOwnPullListener(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string
		want []string // in the error; none: accepted
	}{
		{"flag", []string{"--worker-addr=127.0.0.1:7072"}, "", []string{"--worker-addr", "--worker-listen"}},
		{"localhost", []string{"--worker-addr=localhost:7300", "--worker-listen=127.0.0.1:7300"}, "", []string{"--worker-addr"}},
		{"environment", nil, "127.0.0.1:7072", []string{"SLUICE_WORKER_ADDR", "--worker-listen", "SLUICE_PULL_ADDR"}},
		{"another address", []string{"--worker-addr=127.0.0.1:7300"}, "", nil},
		{"another port on the same host", nil, "127.0.0.1:7300", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("SLUICE_WORKER_ADDR", tt.env)
			}
			_, err := parse(append([]string{"--data-dir", t.TempDir()}, tt.args...), io.Discard)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("parse: %v, want it accepted", err)
				}
				return
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("parse: %v, want an error containing %q", err, w)
				}
			}
		})
	}
}

// TestStopDuringStartIsClean: a stop signal during start-up (ctx ends
// before the gateway is up) ends it with no error. The start-up work under
// way failed with ctx, and the gateway exited with status 1 and "create
// queues: ensure queues: context canceled", a failure to whatever
// supervises it, for the stop it was asked for (found in review).
func TestStopDuringStartIsClean(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := run(ctx, []string{"--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, io.Discard, io.Discard)
	if err != nil {
		t.Fatalf("run: %v, want no error", err)
	}
}

// TestWelcomeSpeaksTheListenersTLS: with --tls-cert the banner printed
// plaintext commands (grpcurl -plaintext, sluicectl without --tls-ca),
// which failed against the listener with an error that names no flag
// (found in review).
func TestWelcomeSpeaksTheListenersTLS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode         string
		want, absent []string
	}{
		{"off", []string{"grpcurl -plaintext", "--key dev-key 'hello"}, []string{"--tls-ca"}},
		{"tls", []string{"grpcurl -cacert", "--key dev-key --tls-ca", "--key-file wk --tls-ca"}, []string{"-plaintext", "--tls-cert <client"}},
		{"mtls", []string{"-cert <client cert> -key <client key>", "--tls-cert <client cert> --tls-key <client key>"}, []string{"-plaintext"}},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			printWelcome(&out, welcome{addr: "127.0.0.1:7070", key: "dev-key", mode: "embedded", workerAddr: "127.0.0.1:7072", workerKeyFile: "wk", tlsMode: tt.mode})
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("banner lacks %q:\n%s", w, out.String())
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(out.String(), a) {
					t.Errorf("banner has %q:\n%s", a, out.String())
				}
			}
		})
	}
}

// TestDurationFlagsSayWhatToWrite: every duration flag (those --help
// lists as "duration") refuses a number without a unit by saying what to
// write. --retry-base 2 said "parse error", where SLUICE_RETRY_BASE=2
// said what was wanted (found in a walkthrough).
func TestDurationFlagsSayWhatToWrite(t *testing.T) {
	t.Parallel()
	var help strings.Builder
	if _, err := parse([]string{"--help"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	flags := flagconftest.DurationFlags(help.String())
	if len(flags) < 9 {
		t.Fatalf("--help lists %d duration flags (%q), want the gateway's nine or more:\n%s", len(flags), flags, help.String())
	}
	flagconftest.CheckBadDurations(t, flags, func(f, value string) error {
		_, err := parse([]string{"--data-dir", t.TempDir(), "--" + f, value}, io.Discard)
		return err
	})
}

// TestShortAdminKeyRefusedAtStart: an admin key shorter than 8
// characters, given or in <data-dir>/admin-key, fails the start before
// the ingest API listens, saying where it came from. It was taken, where
// tenant and worker keys that short are refused (found in a walkthrough).
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
			err := run(t.Context(), []string{"--data-dir", dir, "--admin-key", tt.flag, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, io.Discard, &logs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run: %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(logs.String(), "listening") {
				t.Errorf("something listened before the start failed:\n%s", logs.String())
			}
		})
	}
}

// TestUndrainedEmbeddedGatewaySaysSo: --drain=false on the embedded
// backend took jobs without a word, though nothing can deliver them while
// it runs (a drainer cannot open its data directory), and it serves no
// admin API or console (found in a walkthrough). It warns at start, and
// its banner does not send the user to cmd/drainer.
func TestUndrainedEmbeddedGatewaySaysSo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	var logs, out syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data-dir", t.TempDir(), "--drain=false", "--listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, &out, &logs)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "sluice is running") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(logs.String(), "--drain=false on the embedded backend: nothing delivers the jobs") {
		t.Errorf("start-up log does not warn that nothing delivers the jobs:\n%s", logs.String())
	}
	if !strings.Contains(out.String(), "no drainers: jobs wait until this gateway runs without --drain=false") || strings.Contains(out.String(), "cmd/drainer") {
		t.Errorf("banner:\n%s\nwant it to say the jobs wait for this gateway, not for cmd/drainer", out.String())
	}
}

// TestMisspelledEnvironmentIsNamed: a SLUICE_* variable that sets no
// setting but is a letter or two from one is named with the one meant
// (SLUICE_CONCURENCY=64 left the default in force without a word; found
// in a walkthrough). The variables sluicectl reads are not the gateway's
// mistakes.
func TestMisspelledEnvironmentIsNamed(t *testing.T) {
	for _, kv := range [][2]string{
		{"SLUICE_CONCURENCY", "64"},
		{"SLUICE_ADDR", "127.0.0.1:7070"},
		{"SLUICE_API_KEY", "k"},
		{"SLUICE_ADMIN_ADDR", "127.0.0.1:7071"},
		{"SLUICE_PULL_ADDR", "127.0.0.1:7072"},
		{"SLUICE_WORKER_KEY", "w"},
	} {
		t.Setenv(kv[0], kv[1])
	}
	c, err := parse([]string{"--data-dir", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"environment variable SLUICE_CONCURENCY sets nothing: gateway has no such setting; did you mean SLUICE_CONCURRENCY?"}
	if !slices.Equal(c.strayEnv, want) {
		t.Errorf("warnings %q, want %q", c.strayEnv, want)
	}
}

// TestStartLogTellsANewStore: a gateway started on a data directory that
// does not exist warns that it made a new, empty one, though it writes its
// keys there before it opens the store; started again, it says the store
// is open with the jobs it holds, and warns of nothing. Both starts
// logged only "embedded store open", and jobs submitted while the volume
// was not mounted were hidden under the mountpoint (found by a tester).
func TestStartLogTellsANewStore(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "vol", "data")
	for _, tt := range []struct {
		name, want, absent string
	}{
		{"first start", `"level":"WARN","msg":"created a new, empty data directory and store in it: if this host had jobs before, stop now: is the volume mounted, and is --data-dir right?","path":"` + dir + `"`, ""},
		{"second start", `"msg":"embedded store open","path":"` + filepath.Join(dir, "queues.db") + `","messages":0`, "created a new"},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		var logs, out syncbuf.Buffer
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--worker-listen", "127.0.0.1:0", "--metrics-listen", ""}, nil, &out, &logs)
		}()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), "sluice is running") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("%s: run: %v", tt.name, err)
		}
		if !strings.Contains(logs.String(), tt.want) || (tt.absent != "" && strings.Contains(logs.String(), tt.absent)) {
			t.Errorf("%s: log:\n%s\nwant %s", tt.name, logs.String(), tt.want)
		}
	}
}
