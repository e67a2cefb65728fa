// Package cliconn opens the gRPC connection of sluice's command-line
// tools (the drainer's admin commands, sluicectl): TLS from the
// --tls-* flags (internal/tlsflags), and the API or admin key sent as
// "authorization: Bearer <key>" on every call.
package cliconn

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"

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
	conn, err := grpc.NewClient(addr, creds, grpc.WithPerRPCCredentials(bearer(key)))
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
