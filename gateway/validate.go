package gateway

import (
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/queue"
)

// Request limits that apply to every tenant.
const (
	MaxAttributes        = 16
	MaxAttributeKeyBytes = 128
	MaxAttributeValBytes = 1024
	MaxIdempotencyKeyLen = 128
	MinTTL               = time.Second
	MaxTTL               = 14 * 24 * time.Hour
	MaxDelay             = queue.MaxDelay
	MaxBatchJobs         = 500
	// MaxMessageBytesDefault bounds a job's encoded envelope on every
	// backend, so a job accepted by the single-node default is accepted on
	// SQS too: base64 (SQS bodies must be text) expands 192 KiB to SQS's
	// 256 KiB.
	MaxMessageBytesDefault = 192 * 1024
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
		field := fmt.Sprintf("%sattributes[%q]", prefix, truncate(k, 32))
		switch {
		case k == "":
			v.add(prefix+"attributes", "keys must not be empty")
		case len(k) > MaxAttributeKeyBytes:
			v.add(field, "key is %d bytes, over the limit of %d", len(k), MaxAttributeKeyBytes)
		case len(val) > MaxAttributeValBytes:
			v.add(field, "value is %d bytes, over the limit of %d", len(val), MaxAttributeValBytes)
		}
	}
	if k := req.GetIdempotencyKey(); len(k) > MaxIdempotencyKeyLen {
		v.add(prefix+"idempotency_key", "is %d bytes, over the limit of %d", len(k), MaxIdempotencyKeyLen)
	}
	var ttl, delay time.Duration
	if d := req.GetTtl(); d != nil {
		if err := d.CheckValid(); err != nil {
			v.add(prefix+"ttl", "is not a valid duration: %v", err)
		} else if ttl = d.AsDuration(); ttl < MinTTL || ttl > MaxTTL {
			v.add(prefix+"ttl", "is %s; must be between %s and %s", ttl, MinTTL, MaxTTL)
		}
	}
	if d := req.GetDelay(); d != nil {
		if err := d.CheckValid(); err != nil {
			v.add(prefix+"delay", "is not a valid duration: %v", err)
		} else if delay = d.AsDuration(); delay < 0 || delay > MaxDelay {
			v.add(prefix+"delay", "is %s; must be between 0s and %s", delay, MaxDelay)
		}
	}
	if ttl > 0 && delay >= ttl {
		v.add(prefix+"ttl", "is %s, not longer than the delay of %s: the job would expire before it could run", ttl, delay)
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
