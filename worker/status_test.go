package worker_test

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-dev/sluice/worker"
)

func TestFromStatus(t *testing.T) {
	t.Parallel()
	withRetry, _ := status.New(codes.ResourceExhausted, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(9 * time.Second)})
	tests := []struct {
		err  error
		want string
	}{
		{nil, "ack"},
		{status.Error(codes.Unavailable, ""), "retry"},
		{status.Error(codes.ResourceExhausted, ""), "retry"},
		{status.Error(codes.DeadlineExceeded, ""), "retry"},
		{status.Error(codes.Internal, ""), "retry"},
		{status.Error(codes.Aborted, ""), "retry"},
		{status.Error(codes.Unknown, ""), "retry"},
		{status.Error(codes.Canceled, ""), "retry"},
		{errors.New("not a status"), "retry"}, // status.Convert: UNKNOWN
		{status.Error(codes.InvalidArgument, ""), "permanent"},
		{status.Error(codes.FailedPrecondition, ""), "permanent"},
		{status.Error(codes.NotFound, ""), "permanent"},
		{status.Error(codes.Unimplemented, ""), "permanent"},
		{status.Error(codes.PermissionDenied, ""), "permanent"},
		{status.Error(codes.Unauthenticated, ""), "permanent"},
	}
	for _, tt := range tests {
		if got := outcome(worker.FromStatus(tt.err)); got != tt.want {
			t.Errorf("%v: got %s, want %s", tt.err, got, tt.want)
		}
	}
	var ra *worker.RetryAfterError
	if err := worker.FromStatus(withRetry.Err()); !errors.As(err, &ra) || ra.After != 9*time.Second {
		t.Errorf("RetryInfo not honoured: %v", err)
	}
}

// TestFromStatusLeadsWithTheWorkersWords: the error a worker's answer
// becomes (a job's last error) reads "worker: <message> (<code>)", and
// still carries the status.
func TestFromStatusLeadsWithTheWorkersWords(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.FailedPrecondition, "cannot parse the order"), "worker: cannot parse the order (FailedPrecondition)"},
		{status.Error(codes.Unavailable, "db down"), "worker: db down (Unavailable)"},
		{errors.New("connection reset"), "worker: connection reset (Unknown)"},
	} {
		err := worker.FromStatus(tt.err)
		if err.Error() != tt.want {
			t.Errorf("FromStatus(%v) reads %q, want %q", tt.err, err, tt.want)
		}
		if want := status.Convert(tt.err).Code(); status.Code(err) != want || !errors.Is(err, tt.err) {
			t.Errorf("FromStatus(%v) = %v: code %s (want %s), wraps the call's error %v", tt.err, err, status.Code(err), want, errors.Is(err, tt.err))
		}
	}
}

// TestStatusRoundTrip: what a handler returns comes back to the drainer
// with the same verdict and delay.
func TestStatusRoundTrip(t *testing.T) {
	t.Parallel()
	cause := errors.New("downstream is busy")
	tests := []struct {
		give      error
		want      string
		wantAfter time.Duration
	}{
		{nil, "ack", 0},
		{cause, "retry", 0},
		{worker.RetryAfter(cause, 3*time.Second), "retry", 3 * time.Second},
		{worker.Permanent(cause), "permanent", 0},
		{status.Error(codes.NotFound, "a status from a service the handler called"), "retry", 0},
	}
	for _, tt := range tests {
		got := worker.FromStatus(worker.ToStatus(tt.give))
		if outcome(got) != tt.want {
			t.Errorf("%v: came back %v (%s), want %s", tt.give, got, outcome(got), tt.want)
		}
		var ra *worker.RetryAfterError
		if after := time.Duration(0); errors.As(got, &ra) {
			after = ra.After
			if after != tt.wantAfter {
				t.Errorf("%v: delay %s, want %s", tt.give, after, tt.wantAfter)
			}
		} else if tt.wantAfter != 0 {
			t.Errorf("%v: no delay, want %s", tt.give, tt.wantAfter)
		}
	}
}

// TestProtoDocumentsTheTable checks the status table in worker.proto's
// comment, the contract for workers in other languages, against the one in
// code.
func TestProtoDocumentsTheTable(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../proto/sluice/worker/v1/worker.proto")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	retryAt := strings.Index(text, "retry later")
	permAt := strings.Index(text, "permanent: dead-letter")
	if retryAt < 0 || permAt < retryAt {
		t.Fatal("worker.proto no longer has the status table")
	}
	start := strings.Index(text, "ack: the job is deleted")
	byName := map[string]codes.Code{} // "RESOURCE_EXHAUSTED", as the proto writes them
	for c := range codes.Code(17) {
		byName[strings.ToUpper(regexp.MustCompile(`([a-z])([A-Z])`).ReplaceAllString(c.String(), "${1}_${2}"))] = c
	}
	documented := map[codes.Code]bool{}
	for _, name := range regexp.MustCompile(`\b[A-Z][A-Z_]{3,}\b`).FindAllString(text[start:retryAt], -1) {
		c, ok := byName[name]
		if !ok {
			t.Fatalf("worker.proto names %s, not a status code", name)
		}
		documented[c] = true
	}
	for c := range codes.Code(17) {
		if worker.Retryable(c) != documented[c] {
			t.Errorf("%s: retryable in code %v, in worker.proto %v", c, worker.Retryable(c), documented[c])
		}
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ack"
	case worker.IsPermanent(err):
		return "permanent"
	}
	return "retry"
}
