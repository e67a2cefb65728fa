// Package envelope owns the job envelope: the body of every message sluice
// puts on a queue (sluice.envelope.v1.Envelope). It is the gateway–drainer
// contract in one place: the gateway encodes each accepted job with
// Encode, the drainers, the admin API and the test harnesses decode
// bodies with Decode, and every validity rule lives in Check.
//
// A valid envelope has a job id, a tenant and an acceptance time, and all
// of its timestamps are in protobuf's range. A body that does not decode to
// one is malformed: the drainer dead-letters it as it is, never delivers
// it. Encode refuses what Decode would refuse, so a job the gateway
// accepted is never malformed on the far side.
package envelope

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	envelopev1 "github.com/sluice-dev/sluice/gen/sluice/envelope/v1"
)

// Envelope is the wire type, re-exported so that callers need not import
// the generated package.
type Envelope = envelopev1.Envelope

// Check reports why env is not a valid envelope, or nil: no job_id, no
// tenant, no enqueued_at, or a timestamp out of range. The error names the
// field, as in "no tenant" or "expires_at: …".
func Check(env *Envelope) error {
	switch {
	case env == nil:
		return errors.New("no envelope")
	case env.GetJobId() == "":
		return errors.New("no job_id")
	case env.GetTenant() == "":
		return errors.New("no tenant")
	case env.GetEnqueuedAt() == nil:
		return errors.New("no enqueued_at")
	}
	for _, ts := range []struct {
		name string
		ts   *timestamppb.Timestamp
	}{{"enqueued_at", env.GetEnqueuedAt()}, {"first_attempt_at", env.GetFirstAttemptAt()}, {"expires_at", env.GetExpiresAt()}, {"replayed_at", env.GetReplayedAt()}} {
		if ts.ts == nil {
			continue
		}
		if err := ts.ts.CheckValid(); err != nil {
			return fmt.Errorf("%s: %w", ts.name, err)
		}
	}
	return nil
}

// Encode checks env and returns its wire form.
func Encode(env *Envelope) ([]byte, error) {
	if err := Check(env); err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	b, err := proto.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return b, nil
}

// Decode decodes a queue message body and checks it. Its error says why a
// body is malformed ("not an envelope: …", "no tenant", …); the drainer
// records it after "malformed_envelope: " as the dead-letter reason.
func Decode(body []byte) (*Envelope, error) {
	var env Envelope
	if err := proto.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("not an envelope: %w", err)
	}
	if err := Check(&env); err != nil {
		return nil, err
	}
	return &env, nil
}

// Append checks env and appends its wire form (what Encode returns) to b,
// in b's array when it has room: one buffer can hold many bodies. It
// writes the fields itself (wire.go) rather than through proto.Marshal.
func Append(b []byte, env *Envelope) ([]byte, error) {
	if err := Check(env); err != nil {
		return b, fmt.Errorf("encode envelope: %w", err)
	}
	var out []byte
	var err error
	if wireable(env) {
		out, err = appendFields(b, env)
	} else {
		out, err = proto.MarshalOptions{}.MarshalAppend(b, env)
	}
	if err != nil {
		return b, fmt.Errorf("encode envelope: %w", err)
	}
	return out, nil
}
