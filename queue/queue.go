// Package queue defines the contract between sluice and the durable queue
// that holds jobs between the gateway and the drainers.
//
// A Backend stores opaque message bodies in named queues with the semantics
// of Amazon SQS standard queues: at-least-once delivery, a visibility
// timeout that hides a received message until it is deleted or the timeout
// passes, per-message delays, a receive count, and redrive to a dead-letter
// queue after a maximum number of receives. Two implementations exist:
// queue/embeddedqueue (the single-node default) and, later, queue/sqsqueue.
// Both must pass the conformance suite in queue/queuetest.
//
// Callers use errors.Is with the sentinel errors of this package only; each
// backend translates its own errors where they enter.
package queue

import (
	"context"
	"errors"
	"time"
)

// Limits shared by every backend, matching Amazon SQS so that behaviour on the
// embedded backend carries over to production unchanged.
const (
	// MaxBatch is the largest number of entries in one Send, Receive, Delete
	// or ChangeVisibility call.
	MaxBatch = 10
	// MaxBodyBytes is the largest message body a backend accepts (256 KiB).
	MaxBodyBytes = 256 * 1024
	// MaxDelay is the longest per-message delay (15 minutes).
	MaxDelay = 15 * time.Minute
	// MaxVisibilityTimeout is the longest visibility timeout (12 hours).
	MaxVisibilityTimeout = 12 * time.Hour
	// MaxWait is the longest long-poll wait of one Receive (20 seconds).
	MaxWait = 20 * time.Second
)

// Sentinel errors. Backends wrap them with context; test with errors.Is.
var (
	// ErrQueueNotFound means the named queue does not exist.
	ErrQueueNotFound = errors.New("queue not found")
	// ErrReceiptInvalid means a receipt handle no longer names a message this
	// caller holds: it was deleted, its visibility expired and another
	// consumer received it, or the handle is malformed. It is the fencing
	// signal: a consumer that gets it has lost its lease.
	ErrReceiptInvalid = errors.New("receipt handle invalid or lease lost")
	// ErrBatchTooLarge means a call carried more than MaxBatch entries.
	ErrBatchTooLarge = errors.New("batch too large")
	// ErrBodyTooLarge means a message body exceeded MaxBodyBytes.
	ErrBodyTooLarge = errors.New("message body too large")
	// ErrInvalidArgument means a parameter was out of range (delay,
	// visibility timeout, wait, empty batch, duplicate entry id).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrClosed means the backend was closed.
	ErrClosed = errors.New("backend closed")
	// ErrUnavailable means the backend could not take the request now
	// (throttled, disk full, network failure); the caller may retry.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrTaskNotFound means a Redriver has no running move task with the
	// given handle: it never existed, or it has finished or been cancelled.
	ErrTaskNotFound = errors.New("no running move task with this handle")
)

// QueueSpec describes one queue. Backends that own their storage (embedded)
// create queues from specs; SQS creates them with the same attributes when
// asked to (tests, local mode) and otherwise expects Terraform to have done so.
type QueueSpec struct {
	// Name of the queue. Names are produced by topology rules shared with
	// Terraform; backends treat them as opaque.
	Name string
	// VisibilityTimeout is the default time a received message stays
	// hidden. Defaults to 30 seconds.
	VisibilityTimeout time.Duration
	// Retention is how long a message is kept before it is discarded.
	// Defaults to 4 days.
	Retention time.Duration
	// DeadLetterQueue names the queue that receives a message once it has
	// been received MaxReceiveCount times without being deleted. Empty
	// means no redrive.
	DeadLetterQueue string
	// MaxReceiveCount is the number of receives after which a message is
	// moved to DeadLetterQueue on its next receive. Required when
	// DeadLetterQueue is set.
	MaxReceiveCount int
}

// Defaults for QueueSpec fields left zero.
const (
	VisibilityTimeoutDefault = 30 * time.Second
	RetentionDefault         = 4 * 24 * time.Hour
)

// WithDefaults returns a copy of s with zero fields set to their defaults.
func (s QueueSpec) WithDefaults() QueueSpec {
	if s.VisibilityTimeout == 0 {
		s.VisibilityTimeout = VisibilityTimeoutDefault
	}
	if s.Retention == 0 {
		s.Retention = RetentionDefault
	}
	return s
}

// SendEntry is one message to send.
type SendEntry struct {
	// ID identifies the entry within its batch, so results can be matched
	// to entries. Unique within one call.
	ID string
	// Body is the message body, at most MaxBodyBytes.
	Body []byte
	// Delay hides the message for this long after it is stored (0 to
	// MaxDelay).
	Delay time.Duration
	// GroupID names the message's group: sluice sets it to the tenant.
	// Amazon SQS fair queues use it (MessageGroupId on a standard queue)
	// to keep one tenant's backlog from delaying the others' messages;
	// the embedded backend ignores it.
	GroupID string
	// Key, if set, is stored in the same commit as the message by a
	// backend that implements KeyStore; other backends ignore it.
	Key *StoredKey
}

// StoredKey is an idempotency key stored with a message.
type StoredKey struct {
	// Key names the key among all the backend stores; the caller scopes
	// it (the gateway by tenant).
	Key string
	// Value is what KeyStore.LookupKey returns for the key: the job id.
	Value string
	// Expires is when the key is forgotten.
	Expires time.Time
}

// LookupKeyParams are the arguments of KeyStore.LookupKey.
type LookupKeyParams struct {
	Key string
}

// LookupKeysParams are the arguments of MultiKeyStore.LookupKeys.
type LookupKeysParams struct {
	Keys []string
}

// SendParams are the arguments of Backend.Send.
type SendParams struct {
	Queue   string
	Entries []SendEntry // 1 to MaxBatch entries
}

// SendResult reports the outcome of one SendEntry. Exactly one of MessageID
// and Err is set. A message whose result has no Err is durably stored.
type SendResult struct {
	ID        string // the SendEntry.ID this result belongs to
	MessageID string
	Err       error
}

// ReceiveParams are the arguments of Backend.Receive.
type ReceiveParams struct {
	Queue string
	// Max is the largest number of messages to return (1 to MaxBatch).
	Max int
	// Wait is how long to wait for a first message when none is visible
	// (0 to MaxWait). Receive returns as soon as any message is available.
	Wait time.Duration
	// VisibilityTimeout overrides the queue's default for these messages
	// when positive.
	VisibilityTimeout time.Duration
}

// Message is a received message. The ReceiptHandle names this one receive:
// it is the only way to delete the message or change its visibility, and it
// stops working once the lease is lost.
type Message struct {
	MessageID     string
	ReceiptHandle string
	Body          []byte
	// ReceiveCount counts receives including this one.
	ReceiveCount int
	// SentAt is when the message was first stored in this queue.
	SentAt time.Time
}

// DeleteParams are the arguments of Backend.Delete.
type DeleteParams struct {
	Queue          string
	ReceiptHandles []string // 1 to MaxBatch handles
}

// VisibilityChange sets a received message's remaining visibility timeout.
// Zero makes it visible again at once.
type VisibilityChange struct {
	ReceiptHandle string
	Timeout       time.Duration
}

// ChangeVisibilityParams are the arguments of Backend.ChangeVisibility.
type ChangeVisibilityParams struct {
	Queue   string
	Changes []VisibilityChange // 1 to MaxBatch changes
}

// MoveParams are the arguments of Mover.Move: each entry names a message
// received from From by its receipt handle, and what to send to To in
// its place (SendEntry.Key is not stored by a move).
type MoveParams struct {
	From, To string
	Entries  []MoveEntry // 1 to MaxBatch entries
}

// MoveEntry is one message to move.
type MoveEntry struct {
	ReceiptHandle string
	SendEntry
}

// StatsParams are the arguments of Backend.Stats.
type StatsParams struct {
	Queues []string
}

// Stats describes one queue. Counts may be approximate (SQS) but never
// negative.
type Stats struct {
	Queue string
	// Visible messages, ready to be received.
	Visible int64
	// InFlight messages, received and not yet deleted or expired.
	InFlight int64
	// Delayed messages, sent with a delay that has not yet passed.
	Delayed int64
	// OldestAge is the age of the oldest message in the queue, zero when
	// the queue is empty or the backend cannot tell.
	OldestAge time.Duration
}

// Backend is a durable message queue. All methods are safe for concurrent
// use. Batch calls report per-entry outcomes in their results and return an
// error only when the whole call failed (nothing was done).
type Backend interface {
	// EnsureQueues creates the queues that do not exist and checks that the
	// ones that do exist are compatible with their specs. A dead-letter
	// queue must appear before (or in the same call as) the queues that
	// redrive to it.
	EnsureQueues(ctx context.Context, specs []QueueSpec) error
	// Send stores messages. The result has one entry per SendEntry, in
	// order. A result without an error means the message is durable: it
	// survives a crash of this process.
	Send(ctx context.Context, params *SendParams) ([]SendResult, error)
	// Receive returns up to params.Max visible messages, hiding each for
	// the visibility timeout and counting the receive. A message past its
	// queue's MaxReceiveCount is moved to the dead-letter queue instead of
	// being returned. It returns an empty slice if the wait passes first.
	// Messages it got may come back even after ctx ends (the call was
	// already being answered): they are received, and a caller that will
	// not use them hands them back (SetVisibility 0).
	Receive(ctx context.Context, params *ReceiveParams) ([]Message, error)
	// Delete removes received messages. The result has one entry per
	// handle, in order: nil, or an error wrapping ErrReceiptInvalid.
	Delete(ctx context.Context, params *DeleteParams) ([]error, error)
	// ChangeVisibility extends or shortens leases. The result has one entry
	// per change, in order: nil, or an error wrapping ErrReceiptInvalid. A
	// lease ends when its message is deleted, received again, or made
	// visible (timeout 0): a later change with its handle is refused.
	ChangeVisibility(ctx context.Context, params *ChangeVisibilityParams) ([]error, error)
	// Stats returns counts for each named queue, in order.
	Stats(ctx context.Context, params *StatsParams) ([]Stats, error)
	// Close releases the backend. Calls after Close return ErrClosed.
	Close() error
}

// Lister is implemented by backends that can name their queues (both
// sluice's are). It finds queues that a topology no longer lists, such as
// the shard queues of a lane whose shard count was lowered, whose jobs
// must still be delivered.
type Lister interface {
	// ListQueues returns, sorted, the names of the queues whose names
	// start with prefix.
	ListQueues(ctx context.Context, prefix string) ([]string, error)
}

// KeyStore is implemented by backends that store an idempotency key in
// the same commit as its message (SendEntry.Key), so the key survives a
// restart exactly when the message does: the embedded backend. SQS has no
// such commit; there the gateway remembers keys in its memory only.
type KeyStore interface {
	// LookupKey returns the key as stored by a send that was answered, or
	// nil if there is none or it has expired.
	LookupKey(ctx context.Context, params *LookupKeyParams) (*StoredKey, error)
}

// MultiKeyStore is implemented by key stores that look many keys up in
// one call (the embedded backend): the gateway looks up the keys of a
// SubmitBatch together.
type MultiKeyStore interface {
	KeyStore
	// LookupKeys does what LookupKey does for each of params.Keys:
	// keys[i] is the key stored as params.Keys[i], or nil.
	LookupKeys(ctx context.Context, params *LookupKeysParams) (keys []*StoredKey, err error)
}

// MultiSender is implemented by backends that can store the messages of
// several Sends in one commit (the embedded backend, where every commit
// costs an fsync). The gateway hands it all the jobs of one call at once,
// so they share one group commit instead of a commit each, and the call
// waits for one commit instead of the slowest of several.
type MultiSender interface {
	// SendMany does what Send does for each of sends, storing them all in
	// one commit. Each SendParams has Send's limits (at most MaxBatch
	// entries). results[i] and errs[i] are what Send would have returned
	// for sends[i]: a SendParams that Send would refuse as a whole fails
	// alone, and a failed commit fails every one.
	SendMany(ctx context.Context, sends []*SendParams) (results [][]SendResult, errs []error)
}

// FreshReceiver is implemented by backends that can receive a queue's
// newer messages without reading through its older ones (the embedded
// backend). ReceiveSentAfter is Receive restricted to the messages whose
// SentAt is at or after after; older visible messages stay where they
// are, to be received later. A bound a little earlier than the last
// call's for the queue may be taken as that one (the embedded backend:
// less than a minute), so that callers asking concurrently with "now −
// d" do not start the search over. A drainer whose shard's head holds a
// backlog left by an outage reads the fresh jobs behind it this way at
// once; reading through millions of old jobs first took minutes. On SQS,
// whose receives are not in send order, there is no such call.
type FreshReceiver interface {
	ReceiveSentAfter(ctx context.Context, params *ReceiveParams, after time.Time) ([]Message, error)
}

// Mover is implemented by backends that can move received messages to
// another queue in one step (the embedded backend). Each moved message is
// stored in To and its original deleted in the same commit, so a move
// costs one write instead of a send and a delete, and it cannot leave a
// duplicate behind. Elsewhere callers send, then delete.
type Mover interface {
	// Move moves each entry's message. results[i] is SendResult for
	// entries[i]: its MessageID in To, or an error, in which case nothing
	// was done for it (an error wrapping ErrReceiptInvalid: the lease was
	// lost and the message may be with someone else). The error is for
	// the whole call, when nothing was moved.
	Move(ctx context.Context, params *MoveParams) ([]SendResult, error)
}

// Redriver is implemented by backends with a native whole-queue redrive
// (Amazon SQS's StartMessageMoveTask): the messages of a dead-letter queue
// go back, unchanged, to the queues the backend redrove them from.
type Redriver interface {
	// StartRedrive starts moving every message of dlq back to its source
	// queue, at most maxPerSecond a second (0: the backend's default), and
	// returns the backend's task handle.
	StartRedrive(ctx context.Context, dlq string, maxPerSecond int) (task string, err error)
	// ListRedrives returns dlq's recent move tasks, newest first, as the
	// backend keeps them (SQS: at most 10, of the last 14 days).
	ListRedrives(ctx context.Context, dlq string) ([]RedriveTask, error)
	// CancelRedrive stops the running move task with handle task and
	// returns how many messages it had moved; those stay moved. An error
	// wrapping ErrTaskNotFound when no running task has that handle (the
	// backend may instead answer ErrInvalidArgument for a task that is no
	// longer running, or for a malformed handle).
	CancelRedrive(ctx context.Context, task string) (moved int64, err error)
}

// RedriveStatus is the state of a move task, as SQS names it.
type RedriveStatus string

// The states of a move task. A cancelled task is CANCELLING until the
// backend stops it.
const (
	RedriveRunning    RedriveStatus = "RUNNING"
	RedriveCompleted  RedriveStatus = "COMPLETED"
	RedriveCancelling RedriveStatus = "CANCELLING"
	RedriveCancelled  RedriveStatus = "CANCELLED"
	RedriveFailed     RedriveStatus = "FAILED"
)

// RedriveTask is one move task of a dead-letter queue.
type RedriveTask struct {
	// Task is the handle CancelRedrive takes; the backend gives it only
	// while the task runs (SQS), so it is empty for a finished one.
	Task   string
	Status RedriveStatus
	// Moved and ToMove are the backend's approximate counts: messages
	// moved so far, and messages the task set out to move.
	Moved, ToMove int64
	// MaxPerSecond is the task's rate limit; 0 when the backend chose.
	MaxPerSecond int
	Started      time.Time
	// FailureReason says why a FAILED task stopped.
	FailureReason string
}
