package admin

import (
	"context"

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
		src := "the built-in development config"
		if v.Path != "" {
			src = v.Path + " (sha256 " + v.Digest[:12] + ")"
		}
		return nil, status.Errorf(codes.NotFound, "tenant %q is not in %s; its queued jobs are drained with the standard tier's limits", req.GetTenant(), src)
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
