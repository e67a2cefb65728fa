package admin

import (
	"os"
	"path/filepath"
	"strings"
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

// TestTenantNotFoundSaysWhy: a tenant this process does not know is
// answered NOT_FOUND saying which config it looked in and what to do. A
// drainer started without --tenants said `tenant "dev" is not in the
// built-in development config`, which the gateway's has (found in a
// walkthrough).
func TestTenantNotFoundSaysWhy(t *testing.T) {
	t.Parallel()
	parse := func(yaml string) *tenant.Config {
		cfg, err := tenant.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	file := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(file, []byte("tenants:\n  - {id: acme, tier: free, api_keys: [acme-key-1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fromFile, err := tenant.NewLive(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, tenant string
		live         *tenant.Live
		want         []string
		notWant      string
	}{
		{"drainer without --tenants", "dev", tenant.Fixed(parse("{}")), []string{
			`tenant "dev" is unknown here: this process was started without --tenants, so it has no tenant file and drains every tenant's jobs with the standard tier's limits`,
			"give it --tenants (the gateway's tenant file)",
			"that gateway's admin API shows (its --admin-listen)",
		}, "built-in development config"},
		{"gateway without --tenants", "acme", tenant.Fixed(parse("tenants:\n  - {id: dev, tier: standard, api_keys: [sk_dev_12345678]}\n")), []string{
			`tenant "acme" is not in the built-in development config, which has only dev (start the gateway with --tenants for others)`,
			"drained with the standard tier's limits",
		}, "without --tenants, so"},
		{"tenant file", "dev", fromFile, []string{
			`tenant "dev" is not in ` + file + " (sha256 " + fromFile.Version().Digest[:12] + ")",
			"drained with the standard tier's limits",
		}, "--tenants"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Server{}
			a.ServeTenants(tt.live)
			_, err := a.GetTenantLimits(t.Context(), &adminv1.GetTenantLimitsRequest{Tenant: tt.tenant})
			st := status.Convert(err)
			if st.Code() != codes.NotFound {
				t.Fatalf("%v, want NOT_FOUND", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("%q\nwant it to say %q", st.Message(), w)
				}
			}
			if strings.Contains(st.Message(), tt.notWant) {
				t.Errorf("%q\nwant no %q", st.Message(), tt.notWant)
			}
		})
	}
}
