package drainer

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	envelopev1 "github.com/sluice-dev/sluice/gen/sluice/envelope/v1"
)

// decodeEnvelope decodes a queue message body. A body that is not an
// envelope the gateway could have written (not protobuf, or without the
// job id, tenant or acceptance time every job has, or with a timestamp out
// of range) is malformed: the error says why, and the message is
// dead-lettered as it is, for an operator to look at, never delivered.
func decodeEnvelope(body []byte) (*envelopev1.Envelope, error) {
	var env envelopev1.Envelope
	if err := proto.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("not an envelope: %w", err)
	}
	switch {
	case env.GetJobId() == "":
		return nil, errors.New("no job_id")
	case env.GetTenant() == "":
		return nil, errors.New("no tenant")
	case env.GetEnqueuedAt() == nil:
		return nil, errors.New("no enqueued_at")
	}
	for _, ts := range []struct {
		name string
		ts   *timestamppb.Timestamp
	}{{"enqueued_at", env.GetEnqueuedAt()}, {"first_attempt_at", env.GetFirstAttemptAt()}, {"expires_at", env.GetExpiresAt()}} {
		if ts.ts == nil {
			continue
		}
		if err := ts.ts.CheckValid(); err != nil {
			return nil, fmt.Errorf("%s: %w", ts.name, err)
		}
	}
	return &env, nil
}

// lastErrorMax bounds the error an envelope keeps: a worker's answer can
// be long, and the envelope travels with every move.
const lastErrorMax = 1024

// lastErrorText is err's message as an envelope keeps it in last_error:
// valid UTF-8 (protobuf strings must be, or the envelope could not be
// encoded and the job could not move) and at most lastErrorMax bytes.
func lastErrorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= lastErrorMax {
		return s
	}
	cut := lastErrorMax - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
