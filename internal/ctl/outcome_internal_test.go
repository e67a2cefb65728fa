package ctl

import (
	"strings"
	"testing"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// TestReplayOutcome: a replay that left jobs in the DLQ exits with an
// error that says what to do about each kind: run again for jobs a
// backend error kept, inspect for malformed ones that no run can move
// ("run it again" was said of those too).
func TestReplayOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		r       *adminv1.Replay
		want    []string // substrings of the error; none: no error
		notWant string
	}{
		{"all moved", &adminv1.Replay{Id: "r1", State: adminv1.Replay_STATE_DONE, Matched: 4, Moved: 4}, nil, ""},
		{"dry run with malformed", &adminv1.Replay{Id: "r1", State: adminv1.Replay_STATE_DONE, DryRun: true, Matched: 4, Failed: 2, Malformed: 2}, nil, ""},
		{
			"backend errors", &adminv1.Replay{Id: "r1", State: adminv1.Replay_STATE_DONE, Matched: 4, Moved: 2, Failed: 2},
			[]string{"replay r1 could not move 2 of 4 matched jobs", "run it again"},
			"malformed",
		},
		{
			"malformed only", &adminv1.Replay{Id: "r1", State: adminv1.Replay_STATE_DONE, Matched: 4, Moved: 1, Failed: 3, Malformed: 3},
			[]string{"replay r1 left 3 of 4 matched jobs in the DLQ because they are malformed", "sluicectl dlq list --reason malformed_envelope"},
			"run it again",
		},
		{
			"both", &adminv1.Replay{Id: "r1", State: adminv1.Replay_STATE_DONE, Matched: 5, Moved: 1, Failed: 4, Malformed: 1},
			[]string{"could not move 3 of 5", "run it again", "; it left 1 of 5 matched jobs in the DLQ because they are malformed"},
			"",
		},
		{
			"failed run", &adminv1.Replay{Id: "r1", State: adminv1.Replay_STATE_FAILED, Matched: 5, Moved: 1, Error: "backend down"},
			[]string{"replay r1 failed after moving 1 of 5 matched jobs: backend down"},
			"",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := replayOutcome(tt.r)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tt.notWant != "" && strings.Contains(err.Error(), tt.notWant) {
				t.Errorf("error %q says %q", err, tt.notWant)
			}
		})
	}
}

// TestFairnessWithoutSlots: with no delivery slots (pull mode, no worker
// connected) top says why nothing is delivered; with slots it does not.
func TestFairnessWithoutSlots(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		slots int32
		want  bool
	}{{0, true}, {16, false}} {
		var out strings.Builder
		if err := printFairness(&admin{out: &out}, &adminv1.GetFairnessResponse{Slots: tt.slots}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "no pull worker connected"); got != tt.want {
			t.Errorf("slots %d: %q; want the no-worker note: %v", tt.slots, out.String(), tt.want)
		}
	}
}
