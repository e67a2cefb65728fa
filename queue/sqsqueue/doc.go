// Package sqsqueue is the queue.Backend on Amazon SQS standard queues,
// built on aws-sdk-go-v2 (service/sqs, the AWS JSON 1.0 protocol). It is the
// only package that imports the SQS SDK; callers see queue types and queue
// errors only.
//
// # Mapping
//
//	queue.Backend        SQS API (one call unless noted)
//	EnsureQueues         CreateQueue per spec with VisibilityTimeout,
//	                     MessageRetentionPeriod, DelaySeconds=0,
//	                     ReceiveMessageWaitTimeSeconds=0 and, with a dead-letter
//	                     queue, RedrivePolicy {deadLetterTargetArn (the DLQ's
//	                     QueueArn, from GetQueueAttributes, cached),
//	                     maxReceiveCount}; on QueueNameExists (it exists with
//	                     other attributes) GetQueueUrl + SetQueueAttributes
//	Send                 SendMessageBatch, shared by concurrent Sends (below)
//	Receive              ReceiveMessage: WaitTimeSeconds (long poll),
//	                     MaxNumberOfMessages, VisibilityTimeout,
//	                     MessageSystemAttributeNames ApproximateReceiveCount
//	                     (→ ReceiveCount) and SentTimestamp (→ SentAt)
//	Delete               DeleteMessageBatch, shared by concurrent Deletes;
//	                     first a ChangeMessageVisibilityBatch lease check (see
//	                     Errors) for handles whose lease is not known to hold
//	ChangeVisibility     ChangeMessageVisibilityBatch
//	Stats                GetQueueAttributes per queue: ApproximateNumberOfMessages
//	                     (Visible), …NotVisible (InFlight), …Delayed (Delayed);
//	                     OldestAge is always 0 (SQS has no such attribute: only
//	                     the CloudWatch metric ApproximateAgeOfOldestMessage)
//	dead-letter redrive  done by SQS itself on receive, from the RedrivePolicy
//
// Queue names become URLs through Config.QueueURLs or GetQueueUrl, cached
// for the backend's life (dropped when SQS says the queue does not exist).
// Durations are rounded up to whole seconds, SQS's unit: a 1.5 s visibility
// timeout is 2 s, a 1.5 s wait is 2 s.
//
// Message bodies are opaque bytes (protobuf); SQS bodies must be XML
// characters, so bodies travel base64-encoded and are decoded on receive.
// SQS counts the encoded size against its 256 KiB limit (MaxEncodedBodyBytes),
// so the largest raw body is MaxRawBodyBytes, 196,608 bytes, below
// queue.MaxBodyBytes; a larger body gets ErrBodyTooLarge in its entry's
// result with a message saying so, and is never sent. Every producer of a
// queue must use this package (a body that is not base64 is passed on as it
// is, with a warning).
//
// # Batching and linger
//
// Send does not call SQS itself. Its entries join the queue's current batch,
// which goes out as one SendMessageBatch when it holds 10 entries, when the
// next entry would take its encoded bodies past MaxBatchPayloadBytes, or
// Config.Linger (3 ms) after its first entry. So a gateway whose handlers
// each Send one job makes about one call per 10 jobs under load, at the cost
// of up to Linger of added latency when idle. Batch entry ids are assigned
// here ("0".."9"), so callers' ids need only be unique within their call.
// Each entry's result is its own: an entry SQS fails inside a batch that
// otherwise succeeded gets the translated error (never dropped, never
// silently retried: the caller decides), and a batch call that failed whole
// gives every entry its error. Close sends pending batches at once and waits
// for them.
//
// Delete batches the same way: the single-message acks of concurrent
// deliveries from one queue share DeleteMessageBatch calls.
//
// # Errors
//
// SDK errors are translated where they enter (errors.go): QueueDoesNotExist
// → queue.ErrQueueNotFound; throttling, 5xx, network failures and the
// per-call timeout → queue.ErrUnavailable; ReceiptHandleIsInvalid,
// MessageNotInflight, InvalidIdFormat and an InvalidParameterValue about the
// ReceiptHandle (AWS's answer to an expired handle) → queue.ErrReceiptInvalid;
// other batch and parameter errors → queue.ErrBatchTooLarge, ErrBodyTooLarge,
// ErrInvalidArgument; calls after Close, and long polls Close ends →
// queue.ErrClosed; the caller's own context errors are returned as they are.
// The SDK error stays in the chain for its text.
//
// SQS does not fence deletes: DeleteMessage with the receipt handle of an
// earlier receive succeeds even after another consumer received the message
// (AWS: "the request succeeds, but the message might not be deleted"; the
// emulator deletes nothing and reports success). The queue contract wants
// ErrReceiptInvalid there, so Delete first sets each message's visibility to
// FenceVisibility (30 s; two CallTimeouts plus DeleteLinger if that is
// longer, so the delete lands before the message comes back) with
// ChangeMessageVisibilityBatch, which SQS does refuse for a lost lease,
// and deletes only the messages whose lease held.
// The check is skipped for a handle whose lease the backend knows holds
// until the delete is done: one received (or last extended) with an
// explicit visibility timeout that runs out later than DeleteLinger plus
// CallTimeout from now (plus another CallTimeout when another handle of
// the call needs the check, whose call the delete then waits for),
// counted from when that request was sent, before SQS started the timer. Until then no other consumer can have received
// the message, so the handle is the latest. Drainers receive with an
// explicit timeout and ack within it, so in steady state no ack pays for
// the check. Config.SkipDeleteFencing gives up the check altogether.
//
// # Retries and timeouts
//
// A client built by New uses the SDK's standard retryer with
// Config.MaxAttempts (3) attempts and backoff capped at Config.MaxBackoff
// (1 s); throttling, 5xx and connection errors are retried, and the SDK's
// client-side retry token bucket limits retry storms. Each API call runs
// under Config.CallTimeout (10 s) for all its attempts; ReceiveMessage gets
// queue.MaxWait on top, since a long poll legitimately waits. The HTTP client
// is awshttp.NewBuildableClient (required for AWS_CA_BUNDLE to apply) with a
// 5 s dial timeout, a read-inactivity timeout of MaxWait+CallTimeout and
// 128 idle connections per host. Config.Client replaces all of this.
//
// # Cost
//
// SQS bills per request (each attempt, a batch of up to 10 counting as
// one). APICalls reports requests sent by operation, retries included; the
// per-job cost is their sum over delivered jobs. At full batches a job
// costs 1/10 each of SendMessageBatch, ReceiveMessage and DeleteMessageBatch
// (0.3 calls), plus 1/10 per heartbeat round and per fenced ack; empty long
// polls and Stats (one GetQueueAttributes per queue per call) are overhead
// that does not scale with jobs. Batches fill only under concurrency: a lone
// sequential sender pays one SendMessageBatch per job and the linger on
// each (measured on the emulator: ~200 sends/s from one goroutine, ~16k/s
// and 10 jobs per call from 64).
//
// # The local server
//
// Tests run against fauxqs (test/fauxqs: an npm package pinned by its
// lockfile, started on a loopback port by TestMain). Its queue URLs carry the
// host sqs.us-east-1.localhost, which does not resolve everywhere; this
// package sends every request to Config.Endpoint (the SDK's BaseEndpoint) and
// passes queue URLs only inside request bodies, where fauxqs matches them
// exactly, so no rewriting is needed. It listens on all interfaces when
// started through its startFauxqs API, so start.mjs uses its buildApp API
// and listens on 127.0.0.1 itself. Gaps found against AWS SQS, none of which
// this package relies on (the conformance suite passes with no case
// skipped): DeleteMessageBatch reports success for any receipt handle,
// malformed ones included (AWS rejects malformed handles); a stale handle
// fails ChangeMessageVisibility with ReceiptHandleIsInvalid where AWS
// answers InvalidParameterValue "Value … for parameter ReceiptHandle is
// invalid. Reason: The receipt handle has expired." (or "… not available
// for visibility timeout change"), reserving ReceiptHandleIsInvalid for
// malformed handles (all map to ErrReceiptInvalid); its size limits follow AWS's 2025 1 MiB limit (this
// package keeps to 256 KiB); StartMessageMoveTask is not served; state is
// in memory only.
package sqsqueue
