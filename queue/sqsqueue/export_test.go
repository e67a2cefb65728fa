package sqsqueue

import "time"

// SetReceiveHooks sets b's receive grace (zero: the default) and a
// function called just before each ReceiveMessage call.
func SetReceiveHooks(b *Backend, grace time.Duration, started func()) {
	b.receiveGrace, b.receiveStarted = grace, started
}
