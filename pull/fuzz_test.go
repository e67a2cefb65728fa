package pull

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/worker"
)

// FuzzDecodeResult feeds arbitrary bytes as a worker's result: it never
// panics, refuses what it cannot take with a reason, and turns each
// outcome it takes into the verdict the drainer expects.
func FuzzDecodeResult(f *testing.F) {
	for _, r := range []*workerv1.Result{
		{Lease: "a.1", Outcome: workerv1.Outcome_OUTCOME_ACK},
		{Lease: "a.2", Outcome: workerv1.Outcome_OUTCOME_RETRY, Delay: durationpb.New(time.Second), Error: "busy"},
		{Lease: "a.3", Outcome: workerv1.Outcome_OUTCOME_FAIL, Error: "bad"},
		{Lease: "a.4", Outcome: workerv1.Outcome_OUTCOME_EXTEND, Delay: durationpb.New(time.Hour)},
		{Outcome: workerv1.Outcome_OUTCOME_ACK},
		{Lease: "x", Delay: &durationpb.Duration{Seconds: -1}},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r workerv1.Result
		if proto.Unmarshal(b, &r) != nil {
			return
		}
		v, err := decodeResult(&r)
		if err != nil {
			if err.Error() == "" || v.err != nil {
				t.Fatalf("refusal %q with verdict %v", err, v.err)
			}
			return
		}
		if r.GetLease() == "" {
			t.Fatal("took a result without a lease")
		}
		if d := r.GetDelay().AsDuration(); r.Delay != nil && (d < 0 || d > MaxLeaseTimeout) {
			t.Fatalf("took a delay of %v", d)
		}
		switch r.GetOutcome() {
		case workerv1.Outcome_OUTCOME_ACK, workerv1.Outcome_OUTCOME_EXTEND:
			if v.err != nil {
				t.Fatalf("%v gave %v", r.GetOutcome(), v.err)
			}
		case workerv1.Outcome_OUTCOME_RETRY:
			if v.err == nil || worker.IsPermanent(v.err) {
				t.Fatalf("retry gave %v", v.err)
			}
		case workerv1.Outcome_OUTCOME_FAIL:
			if !worker.IsPermanent(v.err) {
				t.Fatalf("fail gave %v", v.err)
			}
		default:
			t.Fatalf("took outcome %v", r.GetOutcome())
		}
	})
}
