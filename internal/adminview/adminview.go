// Package adminview words the admin API's answers for its two faces,
// sluicectl and the web console, so that both say the same thing.
package adminview

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

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

// ShortReason is a dead letter's reason without the error it may repeat
// (a permanent failure's reason is "permanent_failure: <error>", and the
// error is also the last error).
func ShortReason(d *adminv1.DeadLetter) string {
	r := d.GetReason()
	if e := d.GetLastError(); e != "" {
		r = strings.TrimSuffix(r, ": "+e)
	}
	return r
}

// Printable is s, Go-quoted if it holds a control character or a byte
// that is not UTF-8, so that nothing read from a queue (a tenant's id, a
// worker's error, a panic's message) can drive a terminal or hide in a
// page.
func Printable(s string) string {
	for _, r := range s {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}

// RedriveStatus is a redrive task's status in lower case: running,
// completed, cancelling, cancelled or failed.
func RedriveStatus(r *adminv1.RedriveTask) string {
	return strings.ToLower(strings.TrimPrefix(r.GetStatus().String(), "STATUS_"))
}

// Cut shortens s to at most n characters (runes), the last of them an
// ellipsis when it was longer: for table cells, in the console and
// sluicectl alike.
func Cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
