// Package ingestcheck finds what in a SubmitRequest protobuf cannot
// encode, before it is sent: the Go client (package client) and sluicectl
// submit refuse such a job naming the field. Sent, it failed the call
// with a bare INTERNAL "grpc: error while marshaling: string field
// contains invalid UTF-8", naming nothing.
package ingestcheck

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

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
