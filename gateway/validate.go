package gateway

import (
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-dev/sluice/envelope"
	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/queue"
)

// Request limits that apply to every tenant. Each is refused with
// INVALID_ARGUMENT and a BadRequest field violation naming the field; the
// README's "Limits" table lists them with the transport limits of
// internal/serve. A tenant's payload limit comes from its tier
// (tenant.MaxPayloadBytesCeiling at most).
const (
	MaxAttributes        = 16                  // attributes per job
	MaxAttributeKeyBytes = 128                 // bytes of one attribute key (non-empty)
	MaxAttributeValBytes = 1024                // bytes of one attribute value
	MaxIdempotencyKeyLen = 128                 // bytes of an idempotency key
	MinTTL               = time.Second         // shortest TTL
	MaxTTL               = 14 * 24 * time.Hour // longest TTL (SQS's longest retention)
	MaxDelay             = queue.MaxDelay      // longest delay (SQS's 15 minutes)
	MaxBatchJobs         = 500                 // jobs in one SubmitBatch
	// MaxBatchBytes bounds an encoded SubmitBatch request, so 500 jobs of
	// about 32 KiB fit; send bigger jobs in smaller batches. gRPC refuses a
	// request over serve.MaxRecvMsgBytes (a little more) before decoding.
	MaxBatchBytes = 16 << 20
	// MaxMessageBytesDefault bounds a job's encoded envelope on every
	// backend, so a job accepted by the single-node default is accepted on
	// SQS too: base64 (SQS bodies must be text) expands 192 KiB to SQS's
	// 256 KiB, and the drainer's additions (envelope.Headroom) must fit
	// there too. 190 KiB.
	MaxMessageBytesDefault = 192*1024 - envelope.Headroom
	maxViolationsReported  = 20
)

type violations []*errdetails.BadRequest_FieldViolation

func (v *violations) add(field, format string, args ...any) {
	if len(*v) < maxViolationsReported {
		*v = append(*v, &errdetails.BadRequest_FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
	}
}

// validateJob checks one job against the request limits and the tenant's
// payload limit. prefix names the job within a batch ("jobs[3]."), empty
// for a unary Submit.
func validateJob(req *ingestv1.SubmitRequest, maxPayload int, prefix string) violations {
	var v violations
	switch n := len(req.GetPayload()); {
	case n == 0:
		v.add(prefix+"payload", "must not be empty")
	case n > maxPayload:
		v.add(prefix+"payload", "is %d bytes, over this tenant's limit of %d", n, maxPayload)
	}
	if n := len(req.GetAttributes()); n > MaxAttributes {
		v.add(prefix+"attributes", "has %d entries, over the limit of %d", n, MaxAttributes)
	}
	for k, val := range req.GetAttributes() {
		field := func() string { return fmt.Sprintf("%sattributes[%q]", prefix, truncate(k, 32)) }
		switch {
		case k == "":
			v.add(prefix+"attributes", "keys must not be empty")
		case len(k) > MaxAttributeKeyBytes:
			v.add(field(), "key is %d bytes, over the limit of %d", len(k), MaxAttributeKeyBytes)
		case len(val) > MaxAttributeValBytes:
			v.add(field(), "value is %d bytes, over the limit of %d", len(val), MaxAttributeValBytes)
		}
	}
	if k := req.GetIdempotencyKey(); len(k) > MaxIdempotencyKeyLen {
		v.add(prefix+"idempotency_key", "is %d bytes, over the limit of %d", len(k), MaxIdempotencyKeyLen)
	}
	// The TTL is held against the delay only when both are valid: a delay
	// over its limit made a valid TTL a violation too.
	var ttl, delay time.Duration
	bothValid := true
	if d := req.GetTtl(); d != nil {
		if err := d.CheckValid(); err != nil {
			v.add(prefix+"ttl", "is not a valid duration: %v", err)
			bothValid = false
		} else if ttl = d.AsDuration(); ttl < MinTTL || ttl > MaxTTL {
			v.add(prefix+"ttl", "is %s; must be between %s and %s", ttl, MinTTL, MaxTTL)
			bothValid = false
		}
	}
	if d := req.GetDelay(); d != nil {
		if err := d.CheckValid(); err != nil {
			v.add(prefix+"delay", "is not a valid duration: %v", err)
			bothValid = false
		} else if delay = d.AsDuration(); delay < 0 || delay > MaxDelay {
			v.add(prefix+"delay", "is %s; must be between 0s and %s", delay, MaxDelay)
			bothValid = false
		}
	}
	if bothValid && ttl > 0 && delay >= ttl {
		v.add(prefix+"ttl", "is %s, not longer than the delay of %s: the job would expire before it could run", ttl, delay)
	}
	return v
}

// validateBatch checks the limits of a SubmitBatch as a whole; each job
// is then checked on its own.
func validateBatch(req *ingestv1.SubmitBatchRequest) violations {
	var v violations
	if n := len(req.GetJobs()); n == 0 || n > MaxBatchJobs {
		v.add("jobs", "has %d jobs; send 1 to %d", n, MaxBatchJobs)
	}
	if n := proto.Size(req); n > MaxBatchBytes {
		v.add("jobs", "the batch is %d bytes encoded, over the limit of %d: send its jobs in smaller batches", n, MaxBatchBytes)
	}
	return v
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
