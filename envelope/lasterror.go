package envelope

import "github.com/sluice-dev/sluice/internal/errtext"

// LastErrorMax bounds the error an envelope keeps in last_error: a
// worker's answer can be long, and the envelope travels with every move.
const LastErrorMax = 1024

// Headroom is what the drainer may add to an envelope the gateway
// accepted: first_attempt_at, attempts, last_error (up to LastErrorMax),
// dead_letter_reason and replayed_at, about 1.1 KiB at their largest.
// The gateway's message limit leaves it free, so that a job accepted at
// the limit can still be retried and dead-lettered on SQS.
const Headroom = 2 << 10

// LastError is err's message as an envelope keeps it in last_error: valid
// UTF-8 (protobuf strings must be, or the envelope could not be encoded
// and the job could not move) and at most LastErrorMax bytes.
func LastError(err error) string { return errtext.Cut(err, LastErrorMax) }
