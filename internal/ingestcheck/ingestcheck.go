// Package ingestcheck finds what in a SubmitRequest the gateway can never
// take, before it is sent: strings protobuf cannot encode (UTF8), and
// sizes over the gateway's hard ceilings (Oversize). The Go client
// (package client) refuses such a job naming the field, and sluicectl
// submit the first kind. Sent, a string that is not UTF-8 failed the call
// with a bare INTERNAL "grpc: error while marshaling: string field
// contains invalid UTF-8", and a job over 17 MiB a bare RESOURCE_EXHAUSTED
// "received message larger than max", naming nothing.
package ingestcheck

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

// UTF8 lists, sorted by field, the strings of req that are not valid
// UTF-8 (proto3 strings must be): attribute keys and values, and the
// idempotency key. It is empty when req can be encoded.
func UTF8(req *ingestv1.SubmitRequest) []*errdetails.BadRequest_FieldViolation {
	var vs []*errdetails.BadRequest_FieldViolation
	for k, v := range req.GetAttributes() {
		switch {
		case !utf8.ValidString(k):
			vs = append(vs, &errdetails.BadRequest_FieldViolation{Field: "attributes", Description: fmt.Sprintf("key %q is not valid UTF-8", k)})
		case !utf8.ValidString(v):
			vs = append(vs, &errdetails.BadRequest_FieldViolation{Field: fmt.Sprintf("attributes[%q]", k), Description: "value is not valid UTF-8"})
		}
	}
	if k := req.GetIdempotencyKey(); !utf8.ValidString(k) {
		vs = append(vs, &errdetails.BadRequest_FieldViolation{Field: "idempotency_key", Description: fmt.Sprintf("%q is not valid UTF-8", k)})
	}
	slices.SortFunc(vs, func(a, b *errdetails.BadRequest_FieldViolation) int {
		return strings.Compare(a.GetField(), b.GetField())
	})
	return vs
}

// The gateway's hard ceilings, whatever a tenant's limits. They are
// declared here, not imported, so that package client need not import
// the gateway's; the tests hold them to the gateway's constants.
const (
	// MaxPayloadBytes is the largest payload any tenant may be given
	// (tenant.MaxPayloadBytesCeiling); a tenant's own max_payload_bytes,
	// which only the gateway knows, may be lower.
	MaxPayloadBytes = 160 * 1024
	// MaxRequestBytes is the largest request message the gateway's gRPC
	// server receives (serve.MaxRecvMsgBytes).
	MaxRequestBytes = 17 << 20
)

// Oversize lists the fields of req over the gateway's hard ceilings: a
// payload over MaxPayloadBytes, or a job that encodes to more than
// MaxRequestBytes (with the payload within its ceiling, its attributes or
// idempotency key, whichever is bigger). It is empty when neither is.
func Oversize(req *ingestv1.SubmitRequest) []*errdetails.BadRequest_FieldViolation {
	if n := len(req.GetPayload()); n > MaxPayloadBytes {
		return []*errdetails.BadRequest_FieldViolation{{
			Field:       "payload",
			Description: fmt.Sprintf("is %d bytes, over the most any tenant may send, %d (a tenant's own limit may be lower)", n, MaxPayloadBytes),
		}}
	}
	// proto.Size, which walks the message, is left to the jobs near the
	// ceiling: every job of the client passes here.
	if sizeBound(req) <= MaxRequestBytes {
		return nil
	}
	n := proto.Size(req)
	if n <= MaxRequestBytes {
		return nil
	}
	attrs := 0
	for k, v := range req.GetAttributes() {
		attrs += len(k) + len(v)
	}
	field := "attributes"
	if len(req.GetIdempotencyKey()) > attrs {
		field = "idempotency_key"
	}
	return []*errdetails.BadRequest_FieldViolation{{
		Field:       field,
		Description: fmt.Sprintf("make the job %d bytes encoded, over the most the gateway receives in one request, %d", n, MaxRequestBytes),
	}}
}

// sizeBound is at least req's encoded size, found without encoding it:
// each attribute costs at most 16 bytes beyond its key and value (the
// entry's tag and length, its key's and value's: three tags and three
// lengths of at most 4 bytes below 256 MiB), and the payload's and
// idempotency key's tags and lengths and the two durations at most 64 in
// all (6, 6 and 19 each). A bound past MaxRequestBytes is only a reason to
// encode.
func sizeBound(req *ingestv1.SubmitRequest) int {
	n := len(req.GetPayload()) + len(req.GetIdempotencyKey()) + 64
	for k, v := range req.GetAttributes() {
		n += len(k) + len(v) + 16
	}
	return n
}
