package admin

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
)

// TestReasonPrefixMustNameAReason: a reason filter that no dead-letter
// reason can start with matched nothing, so a typo (attempt_exhausted,
// permanent-failure, upper case) listed "no dead-lettered jobs match" and
// replayed nothing with success. It must be refused naming the reasons; a
// prefix of a reason, or a reason followed by its detail, is accepted;
// "panic" is a reason too.
func TestReasonPrefixMustNameAReason(t *testing.T) {
	t.Parallel()
	tb := topotest.Setup(t, topotest.OneLane)
	deadLetters(t, tb, time.Now().Add(-time.Hour), 4, "a")
	// A job whose in-process handler panicked on its last attempt
	// (drainer.PanicError): its reason was refused as a filter, so those
	// jobs could be replayed only with no reason filter at all.
	panicked := topotest.Envelope("a", "boom", time.Now().Add(-time.Hour))
	panicked.Attempts, panicked.DeadLetterReason = 5, "panic: handler bug: nil map"
	tb.Enqueue(t, tb.Topo.DLQ("std"), panicked)
	a := NewServer(tb.Backend, tb.Topo, topotest.QuietLog)
	defer stopAdmin(t, a)
	for _, tc := range []struct {
		prefix string
		ok     bool
		want   int // jobs listed when ok
	}{
		{"", true, 5},
		{"attempts", true, 2},
		{"attempts_exhausted", true, 2},
		{"permanent_failure: bad", true, 2},
		{"max_receives_exceeded", true, 0},
		{"malformed_envelope: no tenant", true, 0},
		{"panic", true, 1},
		{"panic: handler bug", true, 1},
		{"panic: other", true, 0},
		{"panicked", false, 0},
		{"attempt_exhausted", false, 0},
		{"permanent-failure", false, 0},
		{"PERMANENT_FAILURE", false, 0},
		{"attempts_exhaustedx", false, 0},
		{"timeout", false, 0},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			f := &adminv1.DLQFilter{ReasonPrefix: tc.prefix}
			resp, err := a.ListDLQ(t.Context(), &adminv1.ListDLQRequest{Filter: f})
			_, rerr := a.ReplayDLQ(t.Context(), &adminv1.ReplayDLQRequest{Filter: &adminv1.DLQFilter{ReasonPrefix: tc.prefix, AllTenants: true}, DryRun: true})
			if tc.ok {
				if err != nil || rerr != nil || len(resp.GetJobs()) != tc.want {
					t.Fatalf("list: %d jobs, %v; dry run: %v; want %d jobs", len(resp.GetJobs()), err, rerr, tc.want)
				}
				return
			}
			for _, e := range []error{err, rerr} {
				st := status.Convert(e)
				if st.Code() != codes.InvalidArgument {
					t.Fatalf("reason prefix %q: %v (%d jobs listed), want INVALID_ARGUMENT", tc.prefix, e, len(resp.GetJobs()))
				}
				br, _ := st.Details()[0].(*errdetails.BadRequest)
				if v := br.GetFieldViolations(); len(v) == 0 || v[0].GetField() != "filter.reason_prefix" {
					t.Fatalf("violations %v, want filter.reason_prefix", v)
				}
			}
		})
	}
}
