// Package adminview words the admin API's answers for its two faces,
// sluicectl and the web console, so that both say the same thing.
package adminview

import (
	"fmt"
	"strings"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// ReplayState is a replay's state in lower case: running, done,
// cancelled or failed.
func ReplayState(r *adminv1.Replay) string {
	return strings.ToLower(strings.TrimPrefix(r.GetState().String(), "STATE_"))
}

// DryRunSummary says what a finished dry run found: how many jobs a
// replay would move, out of how many. A dry run with a max stops scanning
// at its max-th match, so it cannot know how many more match: it said "3
// of 3 dead-lettered jobs would be replayed" of a DLQ where 7 matched
// (found in a walkthrough). maxName is how the caller's user gives the
// max ("--max", "most jobs").
func DryRunSummary(r *adminv1.Replay, maxName string) string {
	would := r.GetMatched() - r.GetFailed()
	if m := r.GetMaxJobs(); m > 0 && r.GetMatched() >= m {
		return fmt.Sprintf("%d would be replayed (%s %d; at least %d match: the dry run stopped at the cap, after scanning %d dead-lettered jobs)",
			would, maxName, m, r.GetMatched(), r.GetScanned())
	}
	return fmt.Sprintf("%d of %d dead-lettered jobs would be replayed", would, r.GetScanned())
}
