package admin

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluice-dev/sluice/envelope"
	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/sideliner"
	"github.com/sluice-dev/sluice/tenant"
)

// FuzzDecodeEnvelope feeds arbitrary bodies to envelope.Decode, which the
// drainer and the DLQ listing use, then takes an accepted envelope through
// the drain decision: nothing panics, an accepted envelope has every field the
// drainer relies on, and a refused one says why.
func FuzzDecodeEnvelope(f *testing.F) {
	e := topotest.Envelope("acme", "01JDQ6Z5W1Y7Q0X9R8T4M2N3P5", time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	e.Attributes = map[string]string{"kind": "email"}
	e.TraceContext = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	e.ExpiresAt = timestamppb.New(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	e.Attempts, e.Shard, e.DeadLetterReason = 2, 3, "attempts_exhausted"
	valid, err := envelope.Encode(e)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	for _, g := range garbage(f) {
		f.Add(g.body)
	}
	f.Add([]byte{})
	policy := sideliner.Policy{MaxAttempts: 5, MaxReceives: 3, StalenessBound: time.Minute}
	if err := policy.Validate(); err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := envelope.Decode(body)
		if (env == nil) == (err == nil) {
			t.Fatalf("envelope.Decode = %v, %v: want exactly one", env, err)
		}
		in := sideliner.Input{Now: now, Source: sideliner.SourceShard, ReceiveCount: 1}
		if env == nil {
			in.Malformed = true
			if d := policy.Decide(in); d.Action != sideliner.DeadLetter {
				t.Fatalf("malformed body (%v) decided %v", err, d)
			}
			m := &dlqMessage{msg: receivedWith(body), bad: err}
			if r := reasonOf(m); !strings.HasPrefix(r, "malformed_envelope: ") {
				t.Fatalf("reason %q", r)
			}
			deadLetterOf(m, 64)
			return
		}
		if env.GetJobId() == "" || env.GetTenant() == "" || env.GetEnqueuedAt().CheckValid() != nil {
			t.Fatalf("accepted %v", env)
		}
		in.EnqueuedAt = env.GetEnqueuedAt().AsTime()
		if x := env.GetExpiresAt(); x != nil {
			in.ExpiresAt = x.AsTime()
		}
		in.Attempts = int(env.GetAttempts())
		policy.Decide(in)
		deadLetterOf(&dlqMessage{msg: receivedWith(body), env: env}, 64)
	})
}

// FuzzPageToken: every token decodes to an offset or an error, never a
// negative offset, and every offset round-trips.
func FuzzPageToken(f *testing.F) {
	f.Add(encodePageToken(0, "d"), 50)
	f.Add(encodePageToken(1500, "d"), 7)
	f.Add("nope", 0)
	f.Add("bw", -1)
	f.Fuzz(func(t *testing.T, tok string, n int) {
		if off, _, err := decodePageToken(tok); err == nil && off < 0 {
			t.Fatalf("token %q decodes to %d", tok, off)
		}
		if n >= 0 {
			if off, d, err := decodePageToken(encodePageToken(n, "dig")); err != nil || off != n || d != "dig" {
				t.Fatalf("offset %d round-trips to %d, %q, %v", n, off, d, err)
			}
		}
	})
}

// FuzzReplayRequest decodes arbitrary ReplayDLQ requests and checks the
// admin validation against the rules it must enforce: a replay names its
// tenants (well-formed, within the limit) or sets all_tenants, never both,
// with a finite rate and sane times.
func FuzzReplayRequest(f *testing.F) {
	for _, seed := range []*adminv1.ReplayDLQRequest{
		{Filter: &adminv1.DLQFilter{Tenants: []string{"acme", "beta"}, ReasonPrefix: "attempts"}, RatePerSecond: 50, MaxJobs: 10},
		{Filter: &adminv1.DLQFilter{AllTenants: true, Lanes: []string{"std"}, EnqueuedAfter: timestamppb.New(time.Unix(1700000000, 0)), EnqueuedBefore: timestamppb.New(time.Unix(1800000000, 0))}, DryRun: true},
		{Filter: &adminv1.DLQFilter{}},
		{Filter: &adminv1.DLQFilter{Tenants: []string{""}}, RatePerSecond: math.NaN()},
	} {
		b, err := proto.Marshal(seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req adminv1.ReplayDLQRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		bad := replayViolations(&req)
		for _, v := range bad {
			if v.GetField() == "" || v.GetDescription() == "" {
				t.Fatalf("violation %v", v)
			}
		}
		if len(bad) > 0 {
			return
		}
		flt := req.GetFilter()
		if n := len(flt.GetTenants()); n == 0 && !flt.GetAllTenants() || n > MaxFilterTenants || n > 0 && flt.GetAllTenants() {
			t.Fatalf("accepted filter %v", flt)
		}
		seen := map[string]bool{}
		for _, id := range flt.GetTenants() {
			if !tenant.ValidID(id) || seen[id] {
				t.Fatalf("accepted tenants %q", flt.GetTenants())
			}
			seen[id] = true
		}
		a, b := flt.GetEnqueuedAfter(), flt.GetEnqueuedBefore()
		if (a != nil && a.CheckValid() != nil) || (b != nil && b.CheckValid() != nil) || (a != nil && b != nil && !a.AsTime().Before(b.AsTime())) {
			t.Fatalf("accepted times %v, %v", a, b)
		}
		if r := req.GetRatePerSecond(); math.IsNaN(r) || r < 0 || r > ReplayRateMax || req.GetMaxJobs() < 0 {
			t.Fatalf("accepted rate %v, max %d", r, req.GetMaxJobs())
		}
	})
}

func receivedWith(body []byte) queue.Message {
	return queue.Message{MessageID: "m-1", ReceiptHandle: "r-1", Body: body}
}
