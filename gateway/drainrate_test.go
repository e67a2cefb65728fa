package gateway

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/depth"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/topotest"
	"github.com/sluice-dev/sluice/tenant"
)

// TestBacklogRetryHintFollowsTheDrainRate: a refusal for a full lane
// backlog asks the caller to come back when the excess has drained, at the
// measured drain rate where one is known, else at the lane's declared
// capacity.
func TestBacklogRetryHintFollowsTheDrainRate(t *testing.T) {
	t.Parallel()
	// A backlog of 150 on a premium lane (fraction 1.0) with a mark of
	// 100: 51 jobs too many.
	tests := []struct {
		name      string
		drainRate func(string, time.Time) (float64, bool)
		want      time.Duration
	}{
		{"declared capacity", nil, 51 * time.Second / 5},
		{"measured rate", func(lane string, _ time.Time) (float64, bool) { return 1.5, lane == "premium" }, 34 * time.Second},
		{"no rate known yet", func(string, time.Time) (float64, bool) { return 0, false }, 51 * time.Second / 5},
		{"nothing delivered", func(string, time.Time) (float64, bool) { return 0, true }, stalledRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := topotest.Setup(t, "lanes:\n  - {name: premium, shards: 2, capacity: 5, high_water_mark: 100}\n")
			tenants, err := tenant.Parse([]byte("tenants:\n  - {id: acme, tier: premium, api_keys: [acme-key-1]}\n"))
			if err != nil {
				t.Fatal(err)
			}
			depths := depth.New(depth.Config{Backend: b.Backend, Queues: b.Topo.Names()})
			depths.Add(b.Topo.BacklogQueue("premium"), 150)
			s, err := New(Config{
				Backend: b.Backend, Topology: b.Topo, Tenants: func() *tenant.Config { return tenants }, Depth: depths,
				DrainRate: tt.drainRate, Logger: topotest.QuietLog,
			})
			if err != nil {
				t.Fatal(err)
			}
			acme, _ := tenants.Tenant("acme")
			_, err = s.Submit(WithTenant(t.Context(), acme), &ingestv1.SubmitRequest{Payload: []byte("x")})
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted {
				t.Fatalf("Submit = %v, want RESOURCE_EXHAUSTED", err)
			}
			if stalled := strings.Contains(st.Message(), "nothing was delivered from the lane in the last 30s: are its workers connected?"); stalled != (tt.want == stalledRetry) {
				t.Errorf("refusal %q: says the lane delivers nothing %v, want %v", st.Message(), stalled, tt.want == stalledRetry)
			}
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					if got := ri.GetRetryDelay().AsDuration(); got != tt.want {
						t.Fatalf("retry hint %s, want %s", got, tt.want)
					}
					return
				}
			}
			t.Fatalf("no RetryInfo in %v", st.Details())
		})
	}
}
