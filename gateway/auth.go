package gateway

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/tenant"
)

type tenantKey struct{}

// TenantFrom returns the authenticated tenant of ctx.
func TenantFrom(ctx context.Context) (*tenant.Tenant, bool) {
	t, ok := ctx.Value(tenantKey{}).(*tenant.Tenant)
	return t, ok
}

// WithTenant returns ctx carrying t, as the auth interceptor does.
func WithTenant(ctx context.Context, t *tenant.Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// Authenticator resolves an API key to a tenant.
type Authenticator interface {
	Authenticate(key string) (*tenant.Tenant, bool)
}

var (
	errMissingKey = status.Error(codes.Unauthenticated, "missing API key: send metadata \"authorization: Bearer <key>\"")
	errUnknownKey = status.Error(codes.Unauthenticated, "unknown API key")
	errManyKeys   = status.Error(codes.Unauthenticated, "more than one authorization header: send exactly one \"authorization: Bearer <key>\"")
)

// ingestMethods is the prefix of every method the ingest listener serves
// (but health and reflection).
var ingestMethods = "/" + ingestv1.IngestService_ServiceDesc.ServiceName + "/"

// unserved refuses a call to a service the ingest listener does not serve.
func unserved(method string) error {
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	return status.Errorf(codes.Unimplemented, "unknown service %s: this is sluice's ingest listener; "+
		"pull workers connect to its --worker-listen address, admin clients to its --admin-listen one", service)
}

func authenticate(ctx context.Context, md metadata.MD, auth func() Authenticator) (context.Context, error) {
	if _, ok := TenantFrom(ctx); ok { // TapAuth has done it
		return ctx, nil
	}
	if len(md.Get("authorization")) > 1 {
		return nil, errManyKeys
	}
	key, ok := serve.BearerTokenOf(md)
	if !ok {
		return nil, errMissingKey
	}
	t, ok := auth().Authenticate(key)
	if !ok {
		return nil, errUnknownKey
	}
	return WithTenant(ctx, t), nil
}

// TapAuth returns a tap handle (grpc.InTapHandle) that authenticates each
// call from its headers before gRPC reads the request body, so a caller
// without a valid key cannot make the gateway receive and decode a
// message of up to the receive limit. The tenant it finds rides in the
// call's context, where UnaryAuth and StreamAuth find it. Each Submit or
// SubmitBatch it refuses is counted in m (nil counts nothing) as one
// job with outcome unauthenticated: its body, and so its jobs, are never
// read.
//
// A call to a service other than IngestService (and health and
// reflection) is refused with UNIMPLEMENTED, naming the listeners to use,
// before any key is checked: a pull worker or admin client pointed at the
// ingest listener by mistake was told "unknown API key" about its worker
// or admin key, which sent it after the wrong fix. gRPC's own
// UNIMPLEMENTED for such a call comes only after this handle.
func TapAuth(auth func() Authenticator, m *metrics.Metrics) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if serve.IsPublicMethod(info.FullMethodName) {
			return ctx, nil
		}
		if !strings.HasPrefix(info.FullMethodName, ingestMethods) {
			return ctx, unserved(info.FullMethodName)
		}
		ctx, err := authenticate(ctx, info.Header, auth)
		if err != nil {
			switch info.FullMethodName {
			case ingestv1.IngestService_Submit_FullMethodName, ingestv1.IngestService_SubmitBatch_FullMethodName:
				m.Submit("", "", "", metrics.OutcomeUnauthenticated)
			}
		}
		return ctx, err
	}
}

// UnaryAuth returns an interceptor that authenticates every call except
// health and reflection. auth is called per request so that a reloaded
// tenant config takes effect at once. The calls it refuses are not
// counted: install TapAuth before it, which refuses them first.
func UnaryAuth(auth func() Authenticator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, ok := TenantFrom(ctx); ok || serve.IsPublicMethod(info.FullMethod) {
			return handler(ctx, req) // TapAuth has authenticated it (metadata not copied)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ctx, err := authenticate(ctx, md, auth)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamAuth is UnaryAuth for streaming calls.
func StreamAuth(auth func() Authenticator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if serve.IsPublicMethod(info.FullMethod) {
			return handler(srv, ss)
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		ctx, err := authenticate(ss.Context(), md, auth)
		if err != nil {
			return err
		}
		return handler(srv, &tenantStream{ServerStream: ss, ctx: ctx})
	}
}

type tenantStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tenantStream) Context() context.Context { return s.ctx }
