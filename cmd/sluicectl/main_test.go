package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests build the real binaries once and run sluicectl against a real
// gateway on loopback, delivering to a real `sluicectl worker`.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluicectl-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	build := exec.Command("go", "build", "-race", "-o", dir+"/", "../gateway", "../drainer", ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running binary; its stdout and stderr lines are kept.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	errs []string
	done chan struct{}
}

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(filepath.Join(binDir, bin), args...), done: make(chan struct{})}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	read := func(r io.Reader, into *[]string) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			*into = append(*into, sc.Text())
			p.mu.Unlock()
		}
	}
	wg.Add(2)
	go read(stdout, &p.out)
	go read(stderr, &p.errs)
	go func() { wg.Wait(); _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, l := range append(p.errs, p.out...) {
				t.Logf("%s: %s", bin, l)
			}
		}
	})
	return p
}

// eventually polls cond every 50ms for up to 60s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 60s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logAddr waits for the JSON log line with msg on stderr and returns its
// addr.
func (p *proc) logAddr(t *testing.T, msg string) string {
	t.Helper()
	var addr string
	eventually(t, "log line "+msg, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, l := range p.errs {
			var m struct{ Msg, Addr string }
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == msg {
				addr = m.Addr
				return true
			}
		}
		select {
		case <-p.done:
			t.Fatalf("process exited before logging %q", msg)
		default:
		}
		return false
	})
	return addr
}

func (p *proc) stdout() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

// run runs a binary to its end and returns stdout, stderr and its error.
func run(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// cluster is a gateway delivering to a sluicectl worker that fails
// payloads containing "poison" permanently and "flaky" retryably.
type cluster struct {
	worker  *proc
	gateway *proc
	addr    string // ingest
	admin   string
	dataDir string
	devKey  string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{dataDir: t.TempDir()}
	c.worker = start(t, "sluicectl", "worker", "--listen", "127.0.0.1:0", "--json", "--fail", "poison", "--retry", "flaky")
	w := c.worker.logAddr(t, "worker listening")
	c.gateway = start(t, "gateway", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--metrics-listen", "",
		"--data-dir", c.dataDir, "--worker-addr", w, "--max-attempts", "2", "--retry-base", "100ms", "--retry-cap", "100ms")
	c.addr = c.gateway.logAddr(t, "gateway listening")
	c.admin = c.gateway.logAddr(t, "admin API listening")
	key, err := os.ReadFile(filepath.Join(c.dataDir, "dev-api-key"))
	if err != nil {
		t.Fatal(err)
	}
	c.devKey = strings.TrimSpace(string(key))
	return c
}

// ctl runs sluicectl with the admin flags that find this cluster (the
// key from --data-dir, as an operator on the gateway's machine would).
func (c *cluster) ctl(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return run(t, "sluicectl", append(args, "--admin-addr", c.admin, "--data-dir", c.dataDir)...)
}

func (c *cluster) submit(t *testing.T, payload string, extra ...string) map[string]any {
	t.Helper()
	out, errOut, err := run(t, "sluicectl", append([]string{"submit", "--addr", c.addr, "--key", c.devKey, "--json", payload}, extra...)...)
	if err != nil {
		t.Fatalf("submit %q: %v: %s", payload, err, errOut)
	}
	return decode[map[string]any](t, out)
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not the JSON wanted: %v\n%s", err, s)
	}
	return v
}

// workerLine is a line of `sluicectl worker --json`.
type workerLine struct {
	JobID   string `json:"job_id"`
	Tenant  string `json:"tenant"`
	Attempt int    `json:"attempt"`
	Payload string `json:"payload"`
	Outcome string `json:"outcome"`
}

func (c *cluster) deliveries(t *testing.T, id string) []workerLine {
	t.Helper()
	var out []workerLine
	for _, l := range c.worker.stdout() {
		if w := decode[workerLine](t, l); w.JobID == id {
			out = append(out, w)
		}
	}
	return out
}

type deadLetter struct {
	JobID     string `json:"jobId"`
	Tenant    string `json:"tenant"`
	Reason    string `json:"reason"`
	LastError string `json:"lastError"`
	Attempts  int    `json:"attempts"`
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	cases := [][]string{{"--help"}, {"-h"}, {"help"}, {"help", "stats"}, {"dlq"}, {"dlq", "--help"}, {"submit", "--h"}, {"stats", "-help"}}
	for _, c := range []string{"submit", "stats", "limits", "dlq list", "dlq show", "dlq replay", "dlq status", "dlq cancel", "dlq redrive", "worker", "completion"} {
		cases = append(cases, append(strings.Fields(c), "--help"))
	}
	for _, args := range cases {
		out, errOut, err := run(t, "sluicectl", args...)
		if args[0] == "dlq" && len(args) == 1 {
			// A bare group is a mistake, but still shows its commands.
			if err == nil || !strings.Contains(out, "dlq replay") || !strings.Contains(errOut, "dlq needs a subcommand") {
				t.Errorf("sluicectl dlq: err %v, stdout %q, stderr %q", err, out, errOut)
			}
			continue
		}
		if err != nil || !strings.Contains(out, "usage: sluicectl") {
			t.Errorf("sluicectl %v: err %v, stdout %q, stderr %q: want exit 0 and usage on stdout", args, err, out, errOut)
		}
	}
	// The drainer's aliases too.
	for _, args := range [][]string{{"--help"}, {"help"}, {"stats", "--help"}, {"dlq", "list", "--help"}, {"run", "--help"}} {
		if _, errOut, err := run(t, "drainer", args...); err != nil {
			t.Errorf("drainer %v: %v: %s", args, err, errOut)
		}
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	c := startCluster(t)

	// submit: a job id, delivered to the worker.
	ok := c.submit(t, "hello", "--attr", "kind=greeting")
	id, _ := ok["jobId"].(string)
	if id == "" {
		t.Fatalf("submit --json: %v", ok)
	}
	eventually(t, "job "+id+" delivered", func() bool { return len(c.deliveries(t, id)) == 1 })
	if d := c.deliveries(t, id)[0]; d.Outcome != "ok" || d.Tenant != "dev" || d.Payload != "hello" || d.Attempt != 1 {
		t.Errorf("worker printed %+v", d)
	}
	text, _, err := run(t, "sluicectl", "submit", "--addr", c.addr, "--key", c.devKey, "--idempotency-key", "k1", "once")
	if err != nil || strings.TrimSpace(text) == "" {
		t.Fatalf("submit: %v %q", err, text)
	}
	dup := c.submit(t, "once", "--idempotency-key", "k1")
	if dup["duplicate"] != true || dup["jobId"] != strings.TrimSpace(text) {
		t.Errorf("second submit with the same idempotency key: %v, want a duplicate of %s", dup, text)
	}

	// A permanent and a retryable failure reach the DLQ with their last error.
	poison := c.submit(t, "poison pill")["jobId"].(string)
	flaky := c.submit(t, "flaky job")["jobId"].(string)
	var list struct{ Jobs []deadLetter }
	eventually(t, "two dead letters", func() bool {
		out, errOut, err := c.ctl(t, "dlq", "list", "--json")
		if err != nil {
			t.Fatalf("dlq list --json: %v: %s", err, errOut)
		}
		list = decode[struct{ Jobs []deadLetter }](t, out)
		return len(list.Jobs) == 2
	})
	byID := map[string]deadLetter{}
	for _, j := range list.Jobs {
		byID[j.JobID] = j
	}
	if p := byID[poison]; !strings.HasPrefix(p.Reason, "permanent_failure") || !strings.Contains(p.LastError, `payload matches --fail "poison"`) || p.Attempts != 1 {
		t.Errorf("poison dead letter %+v", p)
	}
	if f := byID[flaky]; f.Reason != "attempts_exhausted" || !strings.Contains(f.LastError, `payload matches --retry "flaky" (attempt 2)`) || f.Attempts != 2 {
		t.Errorf("flaky dead letter %+v: want attempts_exhausted with the worker's last answer", f)
	}

	tests := []struct {
		name string
		args []string
		want []string // in stdout
	}{
		{"stats", []string{"stats"}, []string{"QUEUE", "sluice-standard-dlq", "IN FLIGHT"}},
		{"stats json", []string{"stats", "--json"}, []string{`"queue": "sluice-standard-dlq"`, `"kind": "dlq"`}},
		{"limits", []string{"limits", "dev"}, []string{"tenant", "dev (tier standard, lane standard)", "built-in development config"}},
		{"limits json, flags after the argument", []string{"limits", "dev", "--json"}, []string{`"tier": "standard"`, `"lane": "standard"`}},
		{"dlq list", []string{"dlq", "list", "--reason", "attempts_exhausted"}, []string{"LAST ERROR", flaky, "attempts_exhausted", `"flaky job"`}},
		{"dlq show", []string{"dlq", "show", flaky}, []string{"reason      attempts_exhausted", `payload matches --retry "flaky" (attempt 2)`, `9 bytes: "flaky job"`}},
		{"dlq show json", []string{"dlq", "show", poison, "--json"}, []string{`"jobId": "` + poison + `"`, `"lastError": "worker: payload matches --fail \"poison\" (FailedPrecondition)"`}},
		// The jobs above were delivered by the gateway's drainers: the dev
		// tenant has worker time in the standard lane.
		{"top", []string{"top", "--once"}, []string{"delivery slots", "lane standard", "TENANT", "dev"}},
		{"top json", []string{"top", "--once", "--json"}, []string{`"lane": "standard"`, `"tenant": "dev"`, `"slots":`}},
		{"limits shows the fair rate and ceilings", []string{"limits", "dev"}, []string{"fair rate", "ceilings", "none beyond the drainers' concurrency"}},
		{"dry run", []string{"dlq", "replay", "--tenant", "dev", "--reason", "attempts_exhausted", "--dry-run"}, []string{"dry run: 1 of 2 dead-lettered jobs would be replayed"}},
		{"dry run json", []string{"dlq", "replay", "--all-tenants", "--dry-run", "--json"}, []string{`"matched": "2"`, `"dryRun": true`, `"state": "STATE_DONE"`}},
	}
	for _, tc := range tests {
		out, errOut, err := c.ctl(t, tc.args...)
		if err != nil {
			t.Errorf("%s: sluicectl %v: %v: %s", tc.name, tc.args, err, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: sluicectl %v printed\n%s\nwant it to contain %q", tc.name, tc.args, out, w)
			}
		}
	}

	// Replay the poison job without waiting, follow it with status, cancel
	// it once done (cancel answers with the replay as it is).
	out, errOut, err := c.ctl(t, "dlq", "replay", "--tenant", "dev", "--reason", "permanent_failure", "--no-wait", "--json")
	if err != nil {
		t.Fatalf("replay --no-wait: %v: %s", err, errOut)
	}
	replayID := decode[map[string]any](t, out)["id"].(string)
	eventually(t, "replay done", func() bool {
		out, _, err := c.ctl(t, "dlq", "status", replayID, "--json")
		return err == nil && decode[map[string]any](t, out)["state"] == "STATE_DONE"
	})
	eventually(t, "replayed poison job delivered again", func() bool { return len(c.deliveries(t, poison)) == 2 })
	out, _, err = c.ctl(t, "dlq", "status", "--json")
	if all := decode[struct{ Replays []map[string]any }](t, out); err != nil || len(all.Replays) != 3 || all.Replays[0]["id"] != replayID {
		t.Errorf("dlq status --json: %v %s: want the three replays, newest first", err, out)
	}
	out, _, err = c.ctl(t, "dlq", "status")
	if err != nil || !strings.Contains(out, replayID) || !strings.Contains(out, "done") {
		t.Errorf("dlq status: %v\n%s", err, out)
	}
	out, _, err = c.ctl(t, "dlq", "cancel", replayID, "--json")
	if err != nil || decode[map[string]any](t, out)["moved"] != "1" {
		t.Errorf("dlq cancel of a finished replay: %v\n%s", err, out)
	}
	// A replay followed to its end prints the result table.
	eventually(t, "poison back in the DLQ", func() bool {
		out, _, _ := c.ctl(t, "dlq", "show", poison, "--json")
		return strings.Contains(out, poison)
	})
	out, errOut, err = c.ctl(t, "dlq", "replay", "--tenant", "dev", "--reason", "permanent_failure")
	if err != nil || !strings.Contains(out, "REPLAY") || !strings.Contains(out, "done") || !strings.Contains(errOut, "1/1 moved") {
		t.Errorf("dlq replay: %v\nstdout %s\nstderr %s", err, out, errOut)
	}

	// The drainer's old commands still work, after a pointer on stderr.
	out, errOut, err = run(t, "drainer", "stats", "--json", "--admin-addr", c.admin, "--data-dir", c.dataDir)
	if err != nil || !strings.Contains(errOut, "drainer stats is now sluicectl stats") || !strings.Contains(out, `"queues"`) {
		t.Errorf("drainer stats alias: %v\nstdout %s\nstderr %s", err, out, errOut)
	}

	// Mistakes are refused with what to fix.
	mistakes := []struct {
		args []string
		want string
	}{
		{[]string{}, "give a command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--admin-addr", c.admin, "stats"}, "flags go after the command: sluicectl <command> --admin-addr"},
		{[]string{"dlq", "frobnicate"}, "dlq needs a subcommand"},
		{[]string{"stats", "--no-such-flag"}, "sluicectl stats --help lists the flags"},
		{[]string{"submit", "--addr", c.addr, "x"}, "no API key"},
		{[]string{"submit", "--addr", c.addr, "--key", "sk_wrong", "x"}, "the gateway refused the key"},
		{[]string{"submit", "--addr", c.addr, "--key", c.devKey}, "give exactly one payload"},
		{[]string{"submit", "--addr", c.addr, "--key", c.devKey, "--attr", "novalue", "x"}, "want key=value"},
		{[]string{"limits", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "give the tenant"},
		{[]string{"limits", "nobody", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "NotFound"},
		{[]string{"dlq", "show", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "give the job id"},
		{[]string{"dlq", "show", "nope", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "is not in a dead-letter queue"},
		{[]string{"dlq", "list", "--admin-addr", c.admin, "--admin-key", c.devKey}, "refused the credential"},
		// Another listener's address: each says which one to give.
		{[]string{"submit", "--addr", c.admin, "--key", c.devKey, "x"}, "does not serve the ingest API (unknown service sluice.ingest.v1.IngestService): give --addr the gateway's --listen address"},
		// The ingest listener answered an admin call "unknown API key" (the
		// admin key checked as a tenant key) until it refused unserved services.
		{[]string{"stats", "--admin-addr", c.addr, "--data-dir", c.dataDir}, c.addr + " does not serve the admin API (unknown service sluice.admin.v1.AdminService: this is sluice's ingest listener"},
		{[]string{"dlq", "list", "--admin-addr", c.admin, "--data-dir", t.TempDir()}, "no admin key"},
		{[]string{"stats", "--admin-addr", "127.0.0.1:1", "--data-dir", c.dataDir, "--timeout", "2s"}, "cannot reach the admin API"},
		{[]string{"dlq", "list", "--since", "yesterday", "--admin-addr", c.admin, "--data-dir", c.dataDir}, `--since "yesterday"`},
		{[]string{"dlq", "replay", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "say whose jobs to replay: --tenant T1,T2, or --all-tenants"},
		{[]string{"dlq", "redrive", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "give --lane"},
		{[]string{"dlq", "redrive", "--lane", "standard", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "no native whole-queue redrive"},
		{[]string{"dlq", "cancel", "nope", "--admin-addr", c.admin, "--data-dir", c.dataDir}, `no replay "nope"`},
		{[]string{"worker", "--fail", "("}, "not a regular expression"},
		{[]string{"completion", "tcsh"}, `no completion for shell "tcsh"`},
		{[]string{"top", "--top", "0", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "give 1 to 1000 tenants per lane"},
		{[]string{"top", "--interval", "1ms", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "give at least 100ms"},
		// Values past int32 wrapped to small valid ones; negative times
		// were ignored (found in review).
		{[]string{"dlq", "list", "--limit", "4294967346", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "--limit 4294967346: give 1 to 500"},
		{[]string{"dlq", "list", "--preview", "-1", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "--preview -1: give 0 to 4096"},
		{[]string{"dlq", "redrive", "--lane", "standard", "--rate", "4294967297", "--admin-addr", c.admin, "--data-dir", c.dataDir}, "--rate 4294967297: give 1 to 500"},
		{[]string{"submit", "--addr", c.addr, "--key", c.devKey, "--ttl", "-1m", "x"}, "--ttl -1m0s: must not be negative"},
		{[]string{"submit", "--addr", c.addr, "--key", c.devKey, "--delay", "-5s", "x"}, "--delay -5s: must not be negative"},
	}
	for _, m := range mistakes {
		_, errOut, err := run(t, "sluicectl", m.args...)
		if err == nil || !strings.Contains(errOut, m.want) {
			t.Errorf("sluicectl %q: err=%v, stderr %q; want it to say %q", m.args, err, errOut, m.want)
		}
	}
	// A mistaken flag is answered in one line, not above the whole list
	// of flags.
	if _, errOut, _ := run(t, "sluicectl", "submit", "--lane", "x"); strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
		t.Errorf("sluicectl submit --lane x: stderr %q, want one line", errOut)
	}
}
