// Package admin serves sluice's operator API (sluice.admin.v1.AdminService):
// queue stats, the dead-letter queues (list, replay, native redrive) and
// tenants' effective limits, behind the admin key. It works on the queue
// backend and the topology only; the drainers need not run in the same
// process.
package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

// Server implements the operator API.
type Server struct {
	adminv1.UnimplementedAdminServiceServer

	backend  queue.Backend
	topology topology.Topology
	log      *slog.Logger
	replays  *replayer
	tenants  *tenant.Live // for GetTenantLimits; nil until ServeTenants
	// fairness answers GetFairness; nil until ServeFairness.
	fairness func(top int) *adminv1.GetFairnessResponse
}

// NewServer returns the admin API over backend's queues. It serves at
// once; Stop it to end running replays.
func NewServer(backend queue.Backend, topo topology.Topology, log *slog.Logger) *Server {
	return &Server{backend: backend, topology: topo, log: log, replays: newReplayer(backend, topo, log)}
}

// Start is the startstop lifecycle's: the API runs no goroutine until a
// replay starts, so it only fails after Stop or a first Start.
func (a *Server) Start(context.Context) error { return a.replays.open() }

// Stop cancels running replays and waits until ctx ends for them to hand
// back what they hold; ReplayDLQ refuses new ones from then on.
// Idempotent; safe without Start.
func (a *Server) Stop(ctx context.Context) error { return a.replays.stop(ctx) }

// GetQueueStats reports each queue's counts.
func (a *Server) GetQueueStats(ctx context.Context, req *adminv1.GetQueueStatsRequest) (*adminv1.GetQueueStatsResponse, error) {
	infos := map[string]topology.QueueInfo{}
	var all []string
	for _, q := range a.topology.Queues() {
		infos[q.Spec.Name] = q
		all = append(all, q.Spec.Name)
	}
	names := req.GetQueues()
	for _, n := range names {
		if _, ok := infos[n]; !ok {
			return nil, status.Errorf(codes.NotFound, "queue %q is not part of this topology", n)
		}
	}
	if len(names) == 0 {
		names = all
	}
	stats, err := a.backend.Stats(ctx, &queue.StatsParams{Queues: names})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read queue stats: %v", err)
	}
	resp := &adminv1.GetQueueStatsResponse{}
	for _, s := range stats {
		info := infos[s.Queue]
		resp.Queues = append(resp.Queues, &adminv1.QueueStats{
			Queue:     s.Queue,
			Lane:      info.Lane,
			Kind:      string(info.Kind),
			Visible:   s.Visible,
			InFlight:  s.InFlight,
			Delayed:   s.Delayed,
			OldestAge: durationpb.New(s.OldestAge),
			Retired:   info.Retired,
		})
	}
	return resp, nil
}

// Auth returns interceptors that admit only calls bearing the admin
// key (compared in constant time); health and reflection stay open.
func Auth(adminKey string) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	want := sha256.Sum256([]byte(adminKey))
	check := func(ctx context.Context, method string) error {
		if serve.IsPublicMethod(method) {
			return nil
		}
		token, ok := serve.BearerToken(ctx)
		if !ok {
			return status.Error(codes.Unauthenticated, "missing admin key: send metadata \"authorization: Bearer <admin key>\"")
		}
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			return status.Error(codes.PermissionDenied, "not the admin key: the admin API needs the admin credential, tenant keys are refused")
		}
		return nil
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return unary, stream
}

// List and page limits.
const (
	pageSizeDefault     = 50
	pageSizeMax         = 500
	previewBytesDefault = 64
	previewBytesMax     = 4096
	// pageBytesMax bounds one page's jobs, under the 4 MiB a gRPC client
	// takes by default: 500 jobs with 4 KiB previews and the attributes
	// the gateway allows are about 10 MB.
	pageBytesMax = 3 << 20
)

// ListDLQ returns one page of dead-lettered jobs matching the filter. Pages
// follow the DLQs' receive order, which is stable on the embedded backend
// and approximate on SQS. A page ends early, with a next page token,
// before its jobs pass pageBytesMax.
func (a *Server) ListDLQ(ctx context.Context, req *adminv1.ListDLQRequest) (*adminv1.ListDLQResponse, error) {
	var bad []*errdetails.BadRequest_FieldViolation
	size := int(req.GetPageSize())
	if size == 0 {
		size = pageSizeDefault
	}
	if size < 1 || size > pageSizeMax {
		bad = append(bad, violation("page_size", "must be 1 to %d", pageSizeMax))
	}
	preview := int(req.GetPreviewBytes())
	if preview == 0 {
		preview = previewBytesDefault
	}
	if preview < 0 || preview > previewBytesMax {
		bad = append(bad, violation("preview_bytes", "must be 0 to %d", previewBytesMax))
	}
	offset, digest, err := decodePageToken(req.GetPageToken())
	if err != nil {
		bad = append(bad, violation("page_token", "%v", err))
	}
	bad = append(bad, filterViolations(req.GetFilter())...)
	queues, order, err := dlqQueues(a.topology, req.GetFilter())
	if err != nil {
		bad = append(bad, violation("filter.lanes", "%v", err))
	}
	// A token is an offset among what its listing's filter matched: with
	// another filter it skipped that many of other jobs, silently (found
	// in review).
	want := filterDigest(order, req.GetFilter())
	if err == nil && digest != "" && digest != want {
		bad = append(bad, violation("page_token", "comes from a listing with another filter (lanes, tenants or reason): repeat that listing's filter with it, or leave it out to start from the first page"))
	}
	if len(bad) > 0 {
		return nil, badRequest(bad)
	}
	// Wait for another list or dry run; refuse while a replay holds jobs.
	leave, err := a.replays.gate.enter(ctx, order, scanHolder{})
	if err != nil {
		return nil, scanRefused("list DLQ", err)
	}
	defer leave()
	scan := newDLQScan(a.backend, a.log, a.replays.scanLimit)
	defer scan.release()
	resp := &adminv1.ListDLQResponse{}
	seen, pageBytes := 0, 0
	err = scan.each(ctx, queues, order, func(m *dlqMessage) (bool, error) {
		if !matches(req.GetFilter(), m) {
			return true, nil
		}
		seen++
		if seen <= offset {
			return true, nil
		}
		d := deadLetterOf(m, preview)
		n := proto.Size(d)
		if len(resp.Jobs) == size || (len(resp.Jobs) > 0 && pageBytes+n > pageBytesMax) {
			resp.NextPageToken = encodePageToken(offset+len(resp.Jobs), want)
			return false, nil
		}
		pageBytes += n
		resp.Jobs = append(resp.Jobs, d)
		return true, nil
	})
	switch {
	case errors.Is(err, errScanLimit):
		return nil, status.Errorf(codes.FailedPrecondition, "list DLQ: %v", err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "list DLQ: %v", err)
	}
	return resp, nil
}

func deadLetterOf(m *dlqMessage, preview int) *adminv1.DeadLetter {
	d := &adminv1.DeadLetter{Lane: m.lane, Queue: m.queue, Reason: reasonOf(m)}
	payload := m.msg.Body
	if env := m.env; env != nil {
		d.JobId, d.Tenant, d.EnqueuedAt, d.Attempts, d.Attributes = env.GetJobId(), env.GetTenant(), env.GetEnqueuedAt(), env.GetAttempts(), env.GetAttributes()
		payload = env.GetPayload()
		d.LastError = env.GetLastError()
	} else if m.bad != nil {
		d.LastError = m.bad.Error()
	}
	d.PayloadBytes = int64(len(payload))
	d.PayloadPreview = payload[:min(len(payload), preview)]
	return d
}

// A page token is "o<offset>.<digest>": the offset among the jobs its
// listing's filter matched, and a digest of that filter (its queues,
// tenants and reason; not its times, which "--since 2h" moves between
// pages). A token without a digest, from an older server, is taken as is.
func encodePageToken(offset int, digest string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o" + strconv.Itoa(offset) + "." + digest))
}

func decodePageToken(tok string) (offset int, digest string, err error) {
	if tok == "" {
		return 0, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil && len(b) > 1 && b[0] == 'o' {
		num, digest, _ := strings.Cut(string(b[1:]), ".")
		if n, err := strconv.Atoi(num); err == nil && n >= 0 {
			return n, digest, nil
		}
	}
	return 0, "", fmt.Errorf("not a token from a previous ListDLQ response")
}

// filterDigest identifies what a listing matches apart from time: the
// DLQs it reads, its tenants in any order, its reason prefix.
func filterDigest(order []string, f *adminv1.DLQFilter) string {
	h := sha256.New()
	for _, q := range order {
		h.Write([]byte(q + "\x00"))
	}
	h.Write([]byte{1})
	for _, t := range slices.Sorted(slices.Values(f.GetTenants())) {
		h.Write([]byte(t + "\x00"))
	}
	h.Write([]byte{1})
	h.Write([]byte(f.GetReasonPrefix()))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:9])
}

// ReplayDLQ starts a replay (or runs a dry run). The filter must name
// tenants or set all_tenants.
func (a *Server) ReplayDLQ(ctx context.Context, req *adminv1.ReplayDLQRequest) (*adminv1.ReplayDLQResponse, error) {
	bad := replayViolations(req)
	if _, _, err := dlqQueues(a.topology, req.GetFilter()); err != nil {
		bad = append(bad, violation("filter.lanes", "%v", err))
	}
	if len(bad) > 0 {
		return nil, badRequest(bad)
	}
	r, err := a.replays.start(ctx, req)
	if errors.Is(err, errStopping) {
		return nil, status.Error(codes.Unavailable, "start replay: the admin API is stopping; retry on a running drainer")
	}
	var held *replayHoldsError
	if errors.As(err, &held) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, scanRefused("dry run", err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "start replay: %v", err)
	}
	return &adminv1.ReplayDLQResponse{Replay: r}, nil
}

// GetReplay reports one replay.
func (a *Server) GetReplay(_ context.Context, req *adminv1.GetReplayRequest) (*adminv1.GetReplayResponse, error) {
	r, ok := a.replays.get(req.GetReplayId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no replay %q on this drainer", req.GetReplayId())
	}
	return &adminv1.GetReplayResponse{Replay: r}, nil
}

// ListReplays lists replays, newest first, stopping before the answer
// passes pageBytesMax (truncated then says so): 100 kept replays whose
// filters each name a thousand long tenant names came to 6.6 MB, past a
// gRPC client's 4 MiB limit.
func (a *Server) ListReplays(context.Context, *adminv1.ListReplaysRequest) (*adminv1.ListReplaysResponse, error) {
	resp := &adminv1.ListReplaysResponse{}
	size := 0
	for _, r := range a.replays.list() {
		n := proto.Size(r) + 8 // the field's tag and length
		if len(resp.Replays) > 0 && size+n > pageBytesMax {
			resp.Truncated = true
			break
		}
		resp.Replays = append(resp.Replays, r)
		size += n
	}
	return resp, nil
}

// CancelReplay stops a running replay.
func (a *Server) CancelReplay(_ context.Context, req *adminv1.CancelReplayRequest) (*adminv1.CancelReplayResponse, error) {
	r, ok := a.replays.cancelRun(req.GetReplayId())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no replay %q on this drainer", req.GetReplayId())
	}
	return &adminv1.CancelReplayResponse{Replay: r}, nil
}

// scanRefused is the status of a scan the scan gate refused
// (FAILED_PRECONDITION, naming the replay in the way), or that gave up
// waiting for another scan (the context's code).
func scanRefused(what string, err error) error {
	var held *replayHoldsError
	if errors.As(err, &held) {
		return status.Errorf(codes.FailedPrecondition, "%s: %v", what, err)
	}
	return status.FromContextError(fmt.Errorf("%s: waiting for another scan of the DLQ: %w", what, err)).Err()
}

func violation(field, format string, args ...any) *errdetails.BadRequest_FieldViolation {
	return &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)}
}

func badRequest(v []*errdetails.BadRequest_FieldViolation) error {
	st := status.New(codes.InvalidArgument, "invalid request: "+v[0].GetField()+" "+v[0].GetDescription())
	if ds, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: v}); err == nil {
		st = ds
	}
	return st.Err()
}

// redriveError is the answer to a redrive the backend did not start:
// UNAVAILABLE (try again) only when the backend was unreachable or
// throttled. Anything else it refused, a retry would not fix: a local
// SQS server without StartMessageMoveTask answered "Unknown action", and
// was told to try again.
func redriveError(dlq string, err error) error {
	return moveTaskError("start redrive of "+dlq, "sqs:StartMessageMoveTask and sqs:GetQueueAttributes", err)
}

// moveTaskError is the answer to a call on the backend's move tasks (of
// what) that failed, as redriveError says; actions are the IAM actions
// the call needs on the DLQ.
func moveTaskError(what, actions string, err error) error {
	switch {
	case errors.Is(err, queue.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.Unavailable, "%s: %v", what, err)
	case errors.Is(err, queue.ErrQueueNotFound):
		return status.Errorf(codes.FailedPrecondition, "%s: %v (the DLQ does not exist: apply the Terraform module, or start sluice with --create-queues)", what, err)
	}
	return status.Errorf(codes.FailedPrecondition, "%s: the backend refused it: %v "+
		"(a retry will not help: check that this process may call %s on the DLQ; "+
		"a local SQS server may not offer message move tasks: use sluicectl dlq replay instead)", what, err, actions)
}

// RedriveDLQ starts the backend's native move of a lane's whole DLQ back to
// its source queues.
func (a *Server) RedriveDLQ(ctx context.Context, req *adminv1.RedriveDLQRequest) (*adminv1.RedriveDLQResponse, error) {
	if _, ok := a.topology.Lane(req.GetLane()); !ok {
		return nil, badRequest([]*errdetails.BadRequest_FieldViolation{violation("lane", "%s", unknownLane(a.topology, req.GetLane()))})
	}
	if r := req.GetMaxPerSecond(); r < 0 || r > 500 {
		return nil, badRequest([]*errdetails.BadRequest_FieldViolation{violation("max_per_second", "must be 0 (backend default) to 500")})
	}
	redriver, ok := a.backend.(queue.Redriver)
	if !ok {
		return nil, status.Error(codes.FailedPrecondition, "this backend has no native whole-queue redrive; use ReplayDLQ (sluicectl dlq replay --all-tenants)")
	}
	dlq := a.topology.DLQ(req.GetLane())
	task, err := redriver.StartRedrive(ctx, dlq, int(req.GetMaxPerSecond()))
	if err != nil {
		return nil, redriveError(dlq, err)
	}
	a.log.InfoContext(ctx, "DLQ redrive started", slog.String("dlq", dlq), slog.String("task", task))
	return &adminv1.RedriveDLQResponse{Task: task, Dlq: dlq}, nil
}
