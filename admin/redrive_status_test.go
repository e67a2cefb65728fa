package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
)

// fakeRedriver gives the embedded backend move tasks: it lists tasks
// (or fails with listErr) and answers a cancel with cancelErr.
type fakeRedriver struct {
	queue.Backend
	tasks     []queue.RedriveTask
	listErr   error
	cancelErr error
	listed    string // the DLQ ListRedrives was asked for
}

func (f *fakeRedriver) StartRedrive(context.Context, string, int) (string, error) {
	return "t-new", nil
}

func (f *fakeRedriver) ListRedrives(_ context.Context, dlq string) ([]queue.RedriveTask, error) {
	f.listed = dlq
	return f.tasks, f.listErr
}

func (f *fakeRedriver) CancelRedrive(context.Context, string) (int64, error) {
	if f.cancelErr != nil {
		return 0, f.cancelErr
	}
	return 3, nil
}

// TestRedriveTasksAnswers: the move-task RPCs validate the lane and the
// handle as RedriveDLQ does, answer FAILED_PRECONDITION on the embedded
// backend, and give each backend error the code that tells the operator
// what to do.
func TestRedriveTasksAnswers(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	embedded := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, embedded)
	with := func(f *fakeRedriver) *Server {
		f.Backend = tb.Backend
		a := NewServer(f, tb.Topo, topotest.QuietLog)
		t.Cleanup(func() { stopAdmin(t, a) })
		return a
	}
	list := func(a *Server, lane string) func() error {
		return func() error {
			_, err := a.ListRedrives(t.Context(), &adminv1.ListRedrivesRequest{Lane: lane})
			return err
		}
	}
	cancel := func(a *Server, task string) func() error {
		return func() error {
			_, err := a.CancelRedrive(t.Context(), &adminv1.CancelRedriveRequest{Task: task})
			return err
		}
	}
	denied := errors.New("api error AccessDenied: not authorized")
	tests := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string // the field violation of an INVALID_ARGUMENT
		says  string
	}{
		{"list on embedded", list(embedded, "std"), codes.FailedPrecondition, "", "no native whole-queue redrive"},
		{"list, unknown lane", list(embedded, "gold"), codes.InvalidArgument, "lane", `unknown lane "gold" (the lanes are std)`},
		{"list, no lane", list(with(&fakeRedriver{}), ""), codes.InvalidArgument, "lane", `unknown lane ""`},
		{"list, throttled", list(with(&fakeRedriver{listErr: fmt.Errorf("%w: throttled", queue.ErrUnavailable)}), "std"), codes.Unavailable, "", "throttled"},
		{"list, no DLQ", list(with(&fakeRedriver{listErr: queue.ErrQueueNotFound}), "std"), codes.FailedPrecondition, "", "--create-queues"},
		{"list, denied", list(with(&fakeRedriver{listErr: denied}), "std"), codes.FailedPrecondition, "", "sqs:ListMessageMoveTasks"},
		{"cancel on embedded", cancel(embedded, "t-1"), codes.FailedPrecondition, "", "no native whole-queue redrive"},
		{"cancel, no task", cancel(with(&fakeRedriver{}), ""), codes.InvalidArgument, "task", "is required"},
		{"cancel, huge task", cancel(with(&fakeRedriver{}), strings.Repeat("x", maxTaskHandle+1)), codes.InvalidArgument, "task", "longer than any task handle"},
		{"cancel, no such task", cancel(with(&fakeRedriver{cancelErr: fmt.Errorf("sqs: %w", queue.ErrTaskNotFound)}), "t-1"), codes.NotFound, "", "finished or was cancelled"},
		{"cancel, not running", cancel(with(&fakeRedriver{cancelErr: fmt.Errorf("%w: Only active tasks can be cancelled", queue.ErrInvalidArgument)}), "t-1"), codes.InvalidArgument, "task", "Only active tasks"},
		{"cancel, throttled", cancel(with(&fakeRedriver{cancelErr: fmt.Errorf("%w: throttled", queue.ErrUnavailable)}), "t-1"), codes.Unavailable, "", "throttled"},
		{"cancel, denied", cancel(with(&fakeRedriver{cancelErr: denied}), "t-1"), codes.FailedPrecondition, "", "sqs:CancelMessageMoveTask"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.field != "" {
				wantViolation(t, err, tc.field)
			}
			if st := status.Convert(err); st.Code() != tc.code || !strings.Contains(st.Message(), tc.says) {
				t.Fatalf("%s %q, want %s saying %q", st.Code(), st.Message(), tc.code, tc.says)
			}
		})
	}
}

// TestListRedrivesReportsTasks: every field of a task reaches the answer,
// for the lane's DLQ.
func TestListRedrivesReportsTasks(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	started := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	f := &fakeRedriver{Backend: tb.Backend, tasks: []queue.RedriveTask{
		{Task: "t-2", Status: queue.RedriveRunning, Moved: 4, ToMove: 10, MaxPerSecond: 5, Started: started},
		{Status: queue.RedriveFailed, Moved: 1, ToMove: 2, Started: started.Add(-time.Hour), FailureReason: "CouldNotDetermineMessageSource"},
		{Status: "SOMETHING_NEW"},
	}}
	a := NewServer(f, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	resp, err := a.ListRedrives(t.Context(), &adminv1.ListRedrivesRequest{Lane: "std"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetDlq() != tb.Topo.DLQ("std") || f.listed != tb.Topo.DLQ("std") {
		t.Fatalf("listed %q, answered dlq %q; want %q", f.listed, resp.GetDlq(), tb.Topo.DLQ("std"))
	}
	got := resp.GetTasks()
	if len(got) != 3 {
		t.Fatalf("%d tasks, want 3", len(got))
	}
	if r := got[0]; r.GetTask() != "t-2" || r.GetStatus() != adminv1.RedriveTask_STATUS_RUNNING || r.GetMoved() != 4 || r.GetToMove() != 10 ||
		r.GetMaxPerSecond() != 5 || !r.GetStartedAt().AsTime().Equal(started) {
		t.Errorf("running task answered as %v", r)
	}
	if r := got[1]; r.GetTask() != "" || r.GetStatus() != adminv1.RedriveTask_STATUS_FAILED || r.GetFailureReason() != "CouldNotDetermineMessageSource" {
		t.Errorf("failed task answered as %v", r)
	}
	if r := got[2]; r.GetStatus() != adminv1.RedriveTask_STATUS_UNSPECIFIED || r.GetStartedAt() != nil {
		t.Errorf("task of an unknown status, no start: answered as %v", r)
	}
	c, err := a.CancelRedrive(t.Context(), &adminv1.CancelRedriveRequest{Task: "t-2"})
	if err != nil || c.GetTask() != "t-2" || c.GetMoved() != 3 {
		t.Fatalf("CancelRedrive: %v, %v; want t-2 with 3 moved", c, err)
	}
}
