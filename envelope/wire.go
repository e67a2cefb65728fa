package envelope

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The envelope's wire form, written field by field: proto.Marshal spent
// most of its time on a gateway's envelope (about 300 bytes) working out
// how to encode it, a fifth of the gateway's own CPU per job in a
// SubmitBatch. appendFields writes what proto.Marshal writes: the fields
// in number order, each only when set (proto3), every map entry with its
// key and value, strings checked to be UTF-8. An envelope that carries
// unknown fields (written by a newer build) is left to proto.Marshal,
// which keeps them. TestWireMatchesProto compares the two and fails when
// the message gains a field this file does not write.

// Field numbers of sluice.envelope.v1.Envelope.
const (
	fieldJobID            = 1
	fieldTenant           = 2
	fieldLane             = 3
	fieldPayload          = 4
	fieldAttributes       = 5
	fieldEnqueuedAt       = 6
	fieldFirstAttemptAt   = 7
	fieldAttempts         = 8
	fieldIdempotencyKey   = 9
	fieldExpiresAt        = 10
	fieldTraceContext     = 11
	fieldDeadLetterReason = 12
	fieldShard            = 13
	fieldLastError        = 14
	fieldReplayedAt       = 15
)

// wireable reports whether appendFields writes env exactly as
// proto.Marshal would: no unknown fields in it or in its timestamps.
func wireable(env *Envelope) bool {
	if len(env.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, ts := range [...]*timestamppb.Timestamp{env.GetEnqueuedAt(), env.GetFirstAttemptAt(), env.GetExpiresAt(), env.GetReplayedAt()} {
		if ts != nil && len(ts.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

// errInvalidUTF8 is proto.Marshal's refusal of a string that is not UTF-8.
var errInvalidUTF8 = errors.New("string field contains invalid UTF-8")

// appendFields appends env's wire form to b (see above); env is wireable.
// A string that is not UTF-8 is refused as proto.Marshal refuses it.
func appendFields(b []byte, env *Envelope) ([]byte, error) {
	bad := false // a string is not UTF-8
	b = appendString(b, fieldJobID, env.GetJobId(), &bad)
	b = appendString(b, fieldTenant, env.GetTenant(), &bad)
	b = appendString(b, fieldLane, env.GetLane(), &bad)
	if p := env.GetPayload(); len(p) > 0 {
		b = protowire.AppendTag(b, fieldPayload, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = appendMap(b, fieldAttributes, env.GetAttributes(), &bad)
	b = appendTimestamp(b, fieldEnqueuedAt, env.GetEnqueuedAt())
	b = appendTimestamp(b, fieldFirstAttemptAt, env.GetFirstAttemptAt())
	b = appendUint32(b, fieldAttempts, env.GetAttempts())
	b = appendString(b, fieldIdempotencyKey, env.GetIdempotencyKey(), &bad)
	b = appendTimestamp(b, fieldExpiresAt, env.GetExpiresAt())
	b = appendMap(b, fieldTraceContext, env.GetTraceContext(), &bad)
	b = appendString(b, fieldDeadLetterReason, env.GetDeadLetterReason(), &bad)
	b = appendUint32(b, fieldShard, env.GetShard())
	b = appendString(b, fieldLastError, env.GetLastError(), &bad)
	b = appendTimestamp(b, fieldReplayedAt, env.GetReplayedAt())
	if bad {
		return b, errInvalidUTF8
	}
	return b, nil
}

// appendString appends a set string field, setting bad if it is not
// UTF-8.
func appendString(b []byte, num protowire.Number, s string, bad *bool) []byte {
	if s == "" {
		return b
	}
	if !*bad && !utf8.ValidString(s) {
		*bad = true
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendUint32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// appendMap appends a map<string, string> field: an entry per key, with
// its key and its value even when empty, as proto.Marshal writes them
// (in Go's map order, as it does unless asked to be deterministic).
func appendMap(b []byte, num protowire.Number, m map[string]string, bad *bool) []byte {
	for k, v := range m {
		if !*bad && (!utf8.ValidString(k) || !utf8.ValidString(v)) {
			*bad = true
		}
		n := 1 + protowire.SizeBytes(len(k)) + 1 + protowire.SizeBytes(len(v))
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(n))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b
}

// appendTimestamp appends a google.protobuf.Timestamp field when set.
// Negative numbers take ten bytes, as int64 and int32 varints do.
func appendTimestamp(b []byte, num protowire.Number, ts *timestamppb.Timestamp) []byte {
	if ts == nil {
		return b
	}
	secs, nanos := ts.GetSeconds(), ts.GetNanos()
	n := 0
	if secs != 0 {
		n += 1 + protowire.SizeVarint(uint64(secs))
	}
	if nanos != 0 {
		n += 1 + protowire.SizeVarint(uint64(int64(nanos)))
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if secs != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(secs))
	}
	if nanos != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(nanos)))
	}
	return b
}
