// Package cliconn opens the gRPC connection of sluice's command-line
// tools (the drainer's admin commands, sluicectl): TLS from the
// --tls-* flags (internal/tlsflags), and the API or admin key sent as
// "authorization: Bearer <key>" on every call. An error status that the
// server itself answered a unary call with is told apart from a failure
// to reach it (Reached), so the tools do not blame the address for, say,
// a gateway whose store is full.
package cliconn

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sluice-dev/sluice/internal/tlsflags"
)

// Dial returns a connection to addr whose calls carry key as a bearer
// token. addrFlag names the address's flag in errors ("--admin-addr").
// gRPC connects lazily: an unreachable server shows on the first call.
func Dial(addr, addrFlag, key string, tlsc tlsflags.Client) (*grpc.ClientConn, error) {
	if key == "" {
		return nil, errors.New("no key to send")
	}
	creds, err := tlsc.DialOption("")
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, creds, grpc.WithPerRPCCredentials(bearer(key)), grpc.WithChainUnaryInterceptor(markReached))
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", addrFlag, addr, err)
	}
	return conn, nil
}

// bearer sends a key with every call. The loopback defaults are plaintext,
// so it does not insist on TLS.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// serverError is an error status of a unary call that reached the server:
// one it answered with, or a connection lost after the call was sent.
type serverError struct{ st *status.Status }

func (e *serverError) Error() string              { return e.st.Err().Error() }
func (e *serverError) GRPCStatus() *status.Status { return e.st }

// Reached reports whether err, from a unary call on a connection from
// Dial, came after the call reached the server: false for a server that
// could not be connected to (refused, unresolvable, a TLS mismatch).
func Reached(err error) bool {
	var e *serverError
	return errors.As(err, &e)
}

// markReached marks the errors of calls that got as far as a server.
func markReached(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var p peer.Peer
	err := invoke(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
	if err == nil || p.Addr == nil {
		return err
	}
	if st, ok := status.FromError(err); ok {
		return &serverError{st}
	}
	return err
}
