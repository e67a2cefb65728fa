package admin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// fairnessTopDefault and fairnessTopMax bound GetFairness's tenants per lane.
const (
	fairnessTopDefault = 10
	fairnessTopMax     = 1000
)

// ServeFairness lets GetFairness answer from report, which returns the
// drainers' figures with up to top tenants per lane. Call it before
// serving.
func (a *Server) ServeFairness(report func(top int) *adminv1.GetFairnessResponse) {
	a.fairness = report
}

// GetFairness reports how this process's drainers share their workers.
func (a *Server) GetFairness(_ context.Context, req *adminv1.GetFairnessRequest) (*adminv1.GetFairnessResponse, error) {
	top := int(req.GetTop())
	switch {
	case top < 0 || top > fairnessTopMax:
		return nil, status.Errorf(codes.InvalidArgument, "top %d: must be 0 (the default, %d) to %d", top, fairnessTopDefault, fairnessTopMax)
	case top == 0:
		top = fairnessTopDefault
	}
	if a.fairness == nil {
		return nil, status.Error(codes.Unavailable, "no drainer runs in this process: ask a process that drains (the gateway with --drain, or cmd/drainer)")
	}
	return a.fairness(top), nil
}
