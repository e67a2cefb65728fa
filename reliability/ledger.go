package reliability

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
)

// Job kinds, carried in the payload so the worker knows how to answer.
const (
	KindOK     = "ok"     // acknowledged on its first delivery
	KindFlaky  = "flaky"  // fails its first attempt (retried)
	KindPoison = "poison" // refused for good: dead-lettered at once
	KindDoomed = "doomed" // fails every attempt: dead-lettered when attempts run out
)

// Mix is the share of each job kind in a load; the rest are KindOK.
type Mix struct {
	Flaky, Poison, Doomed float64
}

func (m Mix) pick() string {
	r := rand.Float64()
	switch {
	case r < m.Poison:
		return KindPoison
	case r < m.Poison+m.Doomed:
		return KindDoomed
	case r < m.Poison+m.Doomed+m.Flaky:
		return KindFlaky
	}
	return KindOK
}

// payloadPrefix starts every payload the harness submits.
const payloadPrefix = "rel/"

// ParsePayload returns the submit sequence number and kind a payload
// carries: rel/<seq>/<kind>/<padding>.
func ParsePayload(p string) (seq int64, kind string, ok bool) {
	rest, ok := strings.CutPrefix(p, payloadPrefix)
	if !ok {
		return 0, "", false
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return 0, "", false
	}
	seq, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return seq, parts[1], true
}

// outcome of one submitted job, as the client saw it.
type outcome uint8

const (
	pending outcome = iota
	acked           // OK with a job id: must be delivered or dead-lettered
	refused         // a definite refusal (RESOURCE_EXHAUSTED, INVALID_ARGUMENT): must never appear
	unknown         // an error or no answer: may or may not have been stored
)

type entry struct {
	kind  string
	out   outcome
	jobID string
}

// Ledger records every job the load client submitted and what the
// gateway answered, and checks that record against deliveries and the
// dead-letter queues at the end.
type Ledger struct {
	mu      sync.Mutex
	entries []entry // by sequence number
}

// Next allocates a job: its sequence number and payload (padded to
// size bytes when larger than the header).
func (l *Ledger) Next(mix Mix, size int) (int64, []byte) {
	kind := mix.pick()
	l.mu.Lock()
	seq := int64(len(l.entries))
	l.entries = append(l.entries, entry{kind: kind})
	l.mu.Unlock()
	p := fmt.Appendf(nil, "%s%d/%s/", payloadPrefix, seq, kind)
	for len(p) < size {
		p = append(p, 'x')
	}
	return seq, p
}

// Ack records an OK answer with its job id.
func (l *Ledger) Ack(seq int64, jobID string) {
	l.mu.Lock()
	l.entries[seq].out, l.entries[seq].jobID = acked, jobID
	l.mu.Unlock()
}

// Fail records an error answer (or none, for a call cut by a crash).
func (l *Ledger) Fail(seq int64, code codes.Code) {
	out := unknown
	if code == codes.ResourceExhausted || code == codes.InvalidArgument {
		out = refused
	}
	l.mu.Lock()
	l.entries[seq].out = out
	l.mu.Unlock()
}

// AckedIDs returns the job ids answered OK, by kind.
func (l *Ledger) AckedIDs() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for _, e := range l.entries {
		if e.out == acked {
			out[e.jobID] = e.kind
		}
	}
	return out
}

// DeadLetter is a job read from a queue at the end of a run: from a
// dead-letter queue, or from a live queue the drainers had not emptied.
type DeadLetter struct {
	JobID   string
	Payload string
	Reason  string
}

// Accounting is the ledger checked against what arrived.
type Accounting struct {
	Submitted int `json:"submitted"` // jobs the client sent
	Acked     int `json:"acked"`     // answered OK: each must be delivered or dead-lettered
	Refused   int `json:"refused"`   // RESOURCE_EXHAUSTED or INVALID_ARGUMENT: must never arrive
	Unknown   int `json:"unknown"`   // error or cut off: may arrive, need not

	Delivered    int `json:"delivered"`     // acked jobs the worker acknowledged
	DeadLettered int `json:"dead_lettered"` // acked jobs found only in a DLQ
	// HealthyDeadLettered counts acked jobs of kind ok or flaky that ended
	// in a DLQ (redriven after too many receives, e.g. by repeated
	// crashes): allowed by the contract, but worth a look.
	HealthyDeadLettered int `json:"healthy_dead_lettered"`
	// Queued counts acked jobs found only in a live queue at the end: not
	// lost (drainers would deliver them), but the drain stopped early.
	Queued int `json:"queued"`
	// QueuedIDs lists up to 20 of them, each with its kind.
	QueuedIDs []string `json:"queued_ids,omitempty"`
	Lost      int      `json:"lost"` // acked, not delivered, in no DLQ and no queue: must be 0
	// LostIDs lists up to 20 lost job ids, each with its kind.
	LostIDs []string `json:"lost_ids,omitempty"`
	// LostLog holds the processes' log lines that name the first lost
	// jobs, filled in by the run that has the logs.
	LostLog []string `json:"lost_log,omitempty"`

	Duplicates    int `json:"duplicates"`     // acknowledged deliveries beyond the first per job
	MaxDeliveries int `json:"max_deliveries"` // most acknowledged deliveries of one job
	DLQDuplicates int `json:"dlq_duplicates"` // DLQ copies beyond the first per job

	UnknownArrived int `json:"unknown_arrived"` // unknown submits that were delivered or dead-lettered
	// RefusedArrived counts refused jobs that were delivered or
	// dead-lettered anyway: must be 0.
	RefusedArrived int `json:"refused_arrived"`
	// Strays counts deliveries whose payload the ledger did not write, or
	// whose job id differs from the one acknowledged for that payload:
	// must be 0.
	Strays int `json:"strays"`
}

// Violations lists the contract breaches in a, empty when none.
func (a Accounting) Violations() []string {
	var v []string
	if a.Lost > 0 {
		msg := fmt.Sprintf("%d acknowledged jobs lost (e.g. %s)", a.Lost, strings.Join(a.LostIDs, ", "))
		if len(a.LostLog) > 0 {
			msg += "; their log lines:\n" + strings.Join(a.LostLog, "\n")
		}
		v = append(v, msg)
	}
	if a.Queued > 0 {
		v = append(v, fmt.Sprintf("%d acknowledged jobs were still queued when the run ended (not lost, but the drain stopped early; e.g. %s)", a.Queued, strings.Join(a.QueuedIDs, ", ")))
	}
	if a.RefusedArrived > 0 {
		v = append(v, fmt.Sprintf("%d refused jobs were stored anyway", a.RefusedArrived))
	}
	if a.Strays > 0 {
		v = append(v, fmt.Sprintf("%d deliveries match no acknowledged job", a.Strays))
	}
	return v
}

// Check compares the ledger with the worker's acknowledged deliveries
// (job id → count), the payloads it saw, the dead letters found, and the
// jobs left in live queues.
func (l *Ledger) Check(delivered map[string]int, payloads map[string]string, dlq, queued []DeadLetter) Accounting {
	l.mu.Lock()
	defer l.mu.Unlock()
	var a Accounting
	a.Submitted = len(l.entries)
	inDLQ := map[string]int{}
	for _, d := range dlq {
		inDLQ[d.JobID]++
		payloads[d.JobID] = d.Payload
	}
	inQueue := map[string]bool{}
	for _, q := range queued {
		inQueue[q.JobID] = true
	}
	for _, e := range l.entries {
		switch e.out {
		case acked:
			a.Acked++
			switch {
			case delivered[e.jobID] > 0:
				a.Delivered++
			case inDLQ[e.jobID] > 0:
				a.DeadLettered++
				if e.kind == KindOK || e.kind == KindFlaky {
					a.HealthyDeadLettered++
				}
			case inQueue[e.jobID]:
				a.Queued++
				if len(a.QueuedIDs) < 20 {
					a.QueuedIDs = append(a.QueuedIDs, e.jobID+" ("+e.kind+")")
				}
			default:
				a.Lost++
				if len(a.LostIDs) < 20 {
					a.LostIDs = append(a.LostIDs, e.jobID+" ("+e.kind+")")
				}
			}
		case refused:
			a.Refused++
		default:
			a.Unknown++
		}
	}
	arrived := map[string]bool{}
	for id, n := range delivered {
		arrived[id] = true
		a.Duplicates += n - 1
		a.MaxDeliveries = max(a.MaxDeliveries, n)
	}
	for id, n := range inDLQ {
		arrived[id] = true
		a.DLQDuplicates += n - 1
	}
	for _, id := range slices.Sorted(maps.Keys(arrived)) {
		seq, _, ok := ParsePayload(payloads[id])
		if !ok || seq < 0 || seq >= int64(len(l.entries)) {
			a.Strays++
			continue
		}
		e := l.entries[seq]
		switch e.out {
		case acked:
			if e.jobID != id {
				a.Strays++
			}
		case refused:
			a.RefusedArrived++
		default:
			a.UnknownArrived++
		}
	}
	return a
}
