package embeddedqueue

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/queue"
)

// crashChildEnv makes the test binary run crashChild instead of the tests;
// crashIntervalEnv gives the child's Options.SyncInterval.
const (
	crashChildEnv    = "EMBEDDEDQUEUE_CRASH_CHILD"
	crashIntervalEnv = "EMBEDDEDQUEUE_CRASH_INTERVAL"
)

// TestCrashLosesNothingAcknowledged runs, in each durability mode, a
// child process that sends from 16 goroutines and prints each body once its Send has returned, kills it
// with SIGKILL mid-stream, reopens the store and looks for every printed
// body. Messages it had received stay leased across the crash and come
// back when their visibility timeout passes.
func TestCrashLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			crashAndCount(t, m.opts.SyncInterval)
		})
	}
}

// crashAndCount runs the crash child with sync interval (zero: fsync
// every commit) and checks every acknowledged send after a reopen.
func crashAndCount(t *testing.T, interval time.Duration) {
	path := filepath.Join(t.TempDir(), "queues.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path, crashIntervalEnv+"="+interval.String())
	cmd.Stderr = t.Output()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	const want = 400
	acked := map[string]bool{}
	sc := bufio.NewScanner(out)
	for len(acked) < want && sc.Scan() {
		acked[sc.Text()] = true
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if len(acked) < want {
		t.Fatalf("child acknowledged only %d sends before it ended", len(acked))
	}

	// The child leased "leased" for one second just before the stream.
	b, err := Open(path, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	found := map[string]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		msgs, err := b.Receive(t.Context(), &queue.ReceiveParams{Queue: "q", Max: queue.MaxBatch, Wait: time.Second, VisibilityTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			found[string(m.Body)] = true
		}
		if len(msgs) == 0 && found["leased"] {
			break
		}
	}
	lost := 0
	for body := range acked {
		if !found[body] {
			lost++
		}
	}
	t.Logf("killed after %d acknowledged sends; %d messages found on reopen; lost %d", len(acked), len(found), lost)
	if lost > 0 || !found["leased"] {
		t.Fatalf("%d acknowledged messages lost; leased message found: %t", lost, found["leased"])
	}
}

func crashChild(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	interval, err := time.ParseDuration(os.Getenv(crashIntervalEnv))
	if err != nil {
		fail(err)
	}
	b, err := Open(path, Options{Logger: quiet, SyncInterval: interval})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	if err := b.EnsureQueues(ctx, []queue.QueueSpec{{Name: "q", VisibilityTimeout: time.Second}}); err != nil {
		fail(err)
	}
	send := func(body string) {
		res, err := b.Send(ctx, &queue.SendParams{Queue: "q", Entries: []queue.SendEntry{{ID: "0", Body: []byte(body)}}})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			fail(err)
		}
	}
	send("leased")
	if _, err := b.Receive(ctx, &queue.ReceiveParams{Queue: "q", Max: 1}); err != nil {
		fail(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				body := fmt.Sprintf("g%02d-%06d", g, i)
				send(body)
				mu.Lock()
				fmt.Println(body)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
