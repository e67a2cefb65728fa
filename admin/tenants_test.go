package admin

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/tenant"
)

func TestGetTenantLimits(t *testing.T) {
	t.Parallel()
	cfg, err := tenant.Parse([]byte("tenants:\n  - id: acme\n    tier: free\n    api_keys: [acme-key-1]\n    drain_rate: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := &Server{}
	if _, err := a.GetTenantLimits(t.Context(), &adminv1.GetTenantLimitsRequest{Tenant: "acme"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("without a tenant config: %v", err)
	}
	a.ServeTenants(tenant.Fixed(cfg))
	free, _ := cfg.Tier("free")
	tests := []struct {
		tenant string
		code   codes.Code
	}{
		{"acme", codes.OK},
		{"", codes.InvalidArgument},
		{"nobody", codes.NotFound},
	}
	for _, tt := range tests {
		resp, err := a.GetTenantLimits(t.Context(), &adminv1.GetTenantLimitsRequest{Tenant: tt.tenant})
		if status.Code(err) != tt.code {
			t.Fatalf("tenant %q: %v, want %s", tt.tenant, err, tt.code)
		}
		if err != nil {
			continue
		}
		l := resp.GetLimits()
		if resp.GetTier() != "free" || l.GetDrainRate() != 7 || l.GetSubmitRate() != free.SubmitRate || l.GetLane() != free.Lane {
			t.Fatalf("limits of acme: %v", resp)
		}
	}
}
