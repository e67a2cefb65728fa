package admin

import (
	"errors"
	"slices"
	"testing"
)

// TestScanGateNamesEveryQueueAReplayHolds: a list refused because a
// replay scans its DLQs names every DLQ the two share. It named only the
// first in the list: a replay of every lane, whose jobs were all in the
// standard lane's DLQ, was reported as "moving jobs out of" the premium
// lane's, and the operator went looking for a premium replay.
func TestScanGateNamesEveryQueueAReplayHolds(t *testing.T) {
	t.Parallel()
	all := []string{"premium-dlq", "standard-dlq", "free-dlq"}
	tests := []struct {
		name   string
		replay []string // DLQs the running replay scans
		list   []string // DLQs the refused list scans
		want   []string
	}{
		{"every lane", all, all, all},
		{"one lane each", []string{"standard-dlq"}, all, []string{"standard-dlq"}},
		{"the list's one lane", all, []string{"free-dlq"}, []string{"free-dlq"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newScanGate()
			leave, err := g.enter(t.Context(), tc.replay, scanHolder{replayID: "r1", long: true})
			if err != nil {
				t.Fatal(err)
			}
			defer leave()
			_, err = g.enter(t.Context(), tc.list, scanHolder{})
			var held *replayHoldsError
			if !errors.As(err, &held) {
				t.Fatalf("list during the replay: %v, want a *replayHoldsError", err)
			}
			if held.replayID != "r1" || !slices.Equal(held.queues, tc.want) {
				t.Fatalf("refusal names replay %s scanning %v, want r1 scanning %v: %v", held.replayID, held.queues, tc.want, err)
			}
		})
	}
}
