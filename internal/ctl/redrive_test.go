package ctl_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/admintest"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// TestRedriveCanBeFollowedAndCancelled: `dlq redrive` says how to follow
// and stop the task it started; --status prints the lane's tasks as a
// table (or JSON); --cancel stops one, and a handle of no running task
// is answered NOT_FOUND saying where to look.
func TestRedriveCanBeFollowedAndCancelled(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	started := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	addr := serveAdmin(t, &admintest.MoveTasks{Backend: tb.Backend, Tasks: []queue.RedriveTask{
		{Task: "handle-1", Status: queue.RedriveRunning, Moved: 7, ToMove: 120, MaxPerSecond: 10, Started: started},
		{Status: queue.RedriveFailed, ToMove: 3, Started: started.Add(-time.Hour), FailureReason: "CouldNotDetermineMessageSource"},
	}}, tb)
	common := []string{"--admin-addr", addr, "--admin-key", "k"}

	out, err := run(t, append([]string{"dlq", "redrive", "--lane", "std"}, common...)...)
	if err != nil || !strings.Contains(out, "task handle-1") || !strings.Contains(out, "sluicectl dlq redrive --lane std --status") ||
		!strings.Contains(out, "sluicectl dlq redrive --cancel handle-1") {
		t.Fatalf("dlq redrive: %v; output:\n%s\nwant the task and how to follow and stop it", err, out)
	}

	out, err = run(t, append([]string{"dlq", "redrive", "--lane", "std", "--status"}, common...)...)
	want := []string{
		"STATUS   MOVED  TO MOVE  RATE  STARTED               FAILURE                         TASK",
		"running  7      120      10/s  2025-03-01T12:00:00Z  -                               handle-1",
		"failed   0      3        max   2025-03-01T11:00:00Z  CouldNotDetermineMessageSource  -",
	}
	if err != nil || strings.TrimRight(out, "\n") != strings.Join(want, "\n") {
		t.Fatalf("dlq redrive --status: %v; output:\n%s\nwant:\n%s", err, out, strings.Join(want, "\n"))
	}

	out, err = run(t, append([]string{"dlq", "redrive", "--lane", "std", "--status", "--json"}, common...)...)
	var listed struct {
		Dlq   string `json:"dlq"`
		Tasks []struct {
			Task, Status, Moved, ToMove string
		} `json:"tasks"`
	}
	if err != nil || json.Unmarshal([]byte(out), &listed) != nil || listed.Dlq != tb.Topo.DLQ("std") || len(listed.Tasks) != 2 ||
		listed.Tasks[0].Status != "STATUS_RUNNING" || listed.Tasks[0].Moved != "7" || listed.Tasks[0].ToMove != "120" {
		t.Fatalf("dlq redrive --status --json: %v; output:\n%s", err, out)
	}

	out, err = run(t, append([]string{"dlq", "redrive", "--cancel", "handle-1", "--lane", "std"}, common...)...)
	if err != nil || !strings.Contains(out, "redrive task handle-1 cancelled after moving 7 messages") || !strings.Contains(out, "--lane std --status") {
		t.Fatalf("dlq redrive --cancel: %v; output:\n%s", err, out)
	}
	_, err = run(t, append([]string{"dlq", "redrive", "--cancel", "handle-0"}, common...)...)
	if err == nil || !strings.Contains(err.Error(), "NotFound") || !strings.Contains(err.Error(), "finished or was cancelled") {
		t.Fatalf("dlq redrive --cancel of no running task: %v, want NOT_FOUND saying it may have finished", err)
	}
}

// TestFailedRedriveFailsStatus: --status exits non-zero when the newest
// redrive failed (it exited 0, so a script following a redrive took a
// failure for success), still printing the table; an older failure is
// history and leaves it 0.
func TestFailedRedriveFailsStatus(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	started := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	failed := queue.RedriveTask{Status: queue.RedriveFailed, Moved: 2, ToMove: 3, Started: started, FailureReason: "AccessDenied"}
	done := queue.RedriveTask{Status: queue.RedriveCompleted, Moved: 3, ToMove: 3, Started: started.Add(time.Hour)}
	for _, tc := range []struct {
		name    string
		tasks   []queue.RedriveTask
		wantErr string
	}{
		{"newest failed", []queue.RedriveTask{failed, done}, "the newest redrive of " + tb.Topo.DLQ("std") + " failed after moving 2 of 3 messages: AccessDenied"},
		{"an older one failed", []queue.RedriveTask{done, failed}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveAdmin(t, &admintest.MoveTasks{Backend: tb.Backend, Tasks: tc.tasks}, tb)
			for _, format := range [][]string{nil, {"--json"}} {
				args := append([]string{"dlq", "redrive", "--lane", "std", "--status", "--admin-addr", addr, "--admin-key", "k"}, format...)
				out, err := run(t, args...)
				switch {
				case !strings.Contains(out, "AccessDenied"):
					t.Errorf("%v: output:\n%s\nwant every task listed", args, out)
				case tc.wantErr == "" && err != nil:
					t.Errorf("%v: %v, want no error", args, err)
				case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "sluicectl dlq redrive --lane std")):
					t.Errorf("%v: %v, want an error saying %q and how to start another", args, err, tc.wantErr)
				}
			}
		})
	}
}

// TestRedriveFlagsAreChecked: the flag combinations that make no sense
// are refused before any call, naming what to give.
func TestRedriveFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--status"}, "give --lane: the lane whose redrives to list"},
		{[]string{"--lane", "std", "--status", "--cancel", "x"}, "not both"},
		{[]string{"--lane", "std", "--status", "--rate", "5"}, "--rate is for starting a redrive"},
		{[]string{"--cancel", "x", "--rate", "5"}, "--rate is for starting a redrive"},
	} {
		_, err := run(t, append(append([]string{"dlq", "redrive"}, tc.args...), "--admin-addr", "127.0.0.1:1", "--admin-key", "k")...)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("dlq redrive %v: %v, want it to say %q", tc.args, err, tc.says)
		}
	}
}

// TestRedriveOnEmbeddedSaysToReplay: the embedded store has no move
// tasks; --status and --cancel say so and what to use.
func TestRedriveOnEmbeddedSaysToReplay(t *testing.T) {
	tb := topotest.Setup(t, topotest.OneLane)
	addr := serveAdmin(t, tb.Backend, tb)
	for _, args := range [][]string{{"--lane", "std", "--status"}, {"--cancel", "x"}} {
		_, err := run(t, append(append([]string{"dlq", "redrive"}, args...), "--admin-addr", addr, "--admin-key", "k")...)
		if err == nil || !strings.Contains(err.Error(), "FailedPrecondition") || !strings.Contains(err.Error(), "sluicectl dlq replay") {
			t.Errorf("dlq redrive %v on the embedded store: %v, want FAILED_PRECONDITION pointing at dlq replay", args, err)
		}
	}
}
