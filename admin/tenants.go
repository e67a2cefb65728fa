package admin

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/tenant"
)

// ServeTenants lets GetTenantLimits answer from live. Call it before
// serving.
func (a *Server) ServeTenants(live *tenant.Live) { a.tenants = live }

// GetTenantLimits reports a tenant's effective limits from the tenant
// config this process has loaded.
func (a *Server) GetTenantLimits(_ context.Context, req *adminv1.GetTenantLimitsRequest) (*adminv1.GetTenantLimitsResponse, error) {
	if req.GetTenant() == "" {
		return nil, status.Error(codes.InvalidArgument, "tenant is empty: name the tenant whose limits to show")
	}
	if a.tenants == nil {
		return nil, status.Error(codes.FailedPrecondition, "this process has no tenant config")
	}
	v := a.tenants.Version()
	t, ok := v.Config.Tenant(req.GetTenant())
	if !ok {
		return nil, status.Error(codes.NotFound, tenantNotFound(req.GetTenant(), v))
	}
	l := t.Limits
	return &adminv1.GetTenantLimitsResponse{
		Tenant: t.ID,
		Tier:   t.Tier,
		Limits: &adminv1.TenantLimits{
			Lane:            l.Lane,
			SubmitRate:      l.SubmitRate,
			SubmitBurst:     int32(l.SubmitBurst),
			HwmFraction:     l.HWMFraction,
			DrainRate:       l.DrainRate,
			DrainBurst:      int32(l.DrainBurst),
			MaxInFlight:     int32(l.MaxInFlight),
			MaxPayloadBytes: int32(l.MaxPayloadBytes),
			Weight:          l.Weight,
			MinShare:        l.MinShare,
			MaxDrainRate:    l.MaxDrainRate,
			MaxDrainBurst:   int32(l.MaxDrainBurst),
		},
		Config: &adminv1.TenantConfigVersion{Path: v.Path, Sha256: v.Digest, LoadedAt: timestamppb.New(v.LoadedAt)},
	}, nil
}

// tenantNotFound says why this process has no limits for the tenant id,
// and what to do.
func tenantNotFound(id string, v *tenant.Version) string {
	switch {
	case v.Path != "":
		return fmt.Sprintf("tenant %q is not in %s (sha256 %s); its queued jobs are drained with the standard tier's limits", id, v.Path, v.Digest[:12])
	case v.Config.Len() == 0:
		// A drainer started without --tenants. Its answer was "not in
		// the built-in development config", which the gateway's has:
		// dev, there, is not here (found in a walkthrough).
		return fmt.Sprintf("tenant %q is unknown here: this process was started without --tenants, so it has no tenant file and drains every tenant's jobs with the standard tier's limits; "+
			"give it --tenants (the gateway's tenant file) for per-tenant limits. A gateway started without --tenants has its own development tenant, dev, which that gateway's admin API shows (its --admin-listen)", id)
	}
	ids := make([]string, 0, v.Config.Len())
	for _, t := range v.Config.Tenants() {
		ids = append(ids, t.ID)
	}
	return fmt.Sprintf("tenant %q is not in the built-in development config, which has only %s (start the gateway with --tenants for others); its queued jobs are drained with the standard tier's limits", id, strings.Join(ids, ", "))
}
