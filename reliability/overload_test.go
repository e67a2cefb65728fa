package reliability

import (
	"testing"
	"time"
)

// TestOverload is the short version of the overload run: 10× the
// configured capacity from 20 tenants for a few seconds. Sharing two
// cores with the race detector and other packages' tests, the client may
// reach only part of that; 2.5× the capacity still overloads every
// tenant, which is what this checks (the default run asks for 80 %).
func TestOverload(t *testing.T) {
	t.Parallel()
	res, err := RunOverload(t.Context(), testEnv(t), OverloadConfig{
		Tenants: 20, SubmitRate: 5, Factor: 10, Duration: 5 * time.Second, Callers: 32, RSSBound: 128 << 20, MinOffered: 0.25,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capacity %.0f/s, offered %.0f/s, admitted %.0f/s; answers %v; latency p50 %s p99 %s max %s; RSS %d→%d→%d MiB; recovered in %s; %d acked, %d lost",
		res.Capacity, res.Offered, res.Admitted, res.Load.Codes, res.P50, res.P99, res.Max,
		res.RSSBefore>>20, res.RSSPeak>>20, res.RSSAfter>>20, res.Recovery, res.Acked, res.Lost)
	for _, p := range res.Problems {
		t.Error(p)
	}
}
