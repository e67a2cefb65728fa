package pull

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/serve"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/worker"
)

var (
	// errUnsent answers a delivery taken back from its session before
	// its job was sent: no worker has seen it, so Handle places it
	// again.
	errUnsent     = errors.New("pull: taken back unsent")
	errHubStopped = status.Error(codes.Unavailable, "sluice is shutting down: reconnect to another drainer")
	errKeyRevoked = status.Error(codes.PermissionDenied, "worker key revoked: the tenant file no longer lists it")
)

// delivery is one job placed on a session.
type delivery struct {
	lane     string
	job      *workerv1.Job // job.Lease is set when placed
	result   chan error    // the answer, buffered: sent once
	deadline time.Time     // when the lease times out unanswered; zero until sent (startLease)
	// givenUp: the drainer gave up on the job after it was sent. The
	// worker, which is not told, runs it on: it keeps its credit until
	// the worker answers (the answer is refused), its lease times out or
	// the stream ends.
	givenUp bool
	// msg and enqueuedAt back job and its enqueued_at.
	msg        workerv1.Job
	enqueuedAt timestamppb.Timestamp
}

// session is one worker's Connect stream.
type session struct {
	hub          *Hub
	id           string
	key          string // to check it still authenticates
	lanes        []string
	leaseTimeout time.Duration
	stream       workerv1.PullService_ConnectServer
	log          *slog.Logger

	mu           sync.Mutex
	credits      int
	held         map[string]*delivery // by lease: placed and not answered
	givenUp      int                  // the held jobs given up (delivery.givenUp)
	unsent       []*delivery
	sending      []*delivery // the jobs of the send under way: their leases start when it returns
	refusals     []*workerv1.Refused
	refusalRoom  chan struct{} // a token per queued refusal: a worker flooding bad messages is slowed, not cut off
	sendingSince time.Time     // when the send under way began; zero if none
	stalled      bool
	// silent: a lease timed out with no answer since; the worker gets no
	// new jobs until it answers again (it may have stopped reading).
	silent bool
	seq    uint64
	ended  bool
	endErr error
	wake   chan struct{} // the sender has work
	done   chan struct{} // closed when the session ends
}

// Connect serves one worker's session: see the package doc.
func (h *Hub) Connect(stream workerv1.PullService_ConnectServer) error {
	ctx := stream.Context()
	key, ok := serve.BearerToken(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "missing worker key: send metadata \"authorization: Bearer <worker key>\" (exactly one)")
	}
	w, ok := h.cfg.Authenticate(key)
	if !ok {
		return status.Error(codes.PermissionDenied, "not a worker key: pull workers need a worker key, with --tenants one from the tenant file's workers list, "+
			"without it (development mode) the one in <data-dir>/worker-key (tenant keys and the admin key are refused)")
	}
	first, err := h.firstMessage(stream)
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "the first message must be Hello (lanes, credits)")
	}
	lanes, err := h.lanesFor(w, hello.GetLanes())
	if err != nil {
		return err
	}
	if hello.GetCredits() > MaxCredits {
		return status.Errorf(codes.InvalidArgument, "hello.credits %d: at most %d", hello.GetCredits(), MaxCredits)
	}
	lease := h.cfg.LeaseTimeout
	if hello.LeaseTimeout != nil {
		d := hello.GetLeaseTimeout()
		if err := d.CheckValid(); err != nil || d.AsDuration() < time.Second || d.AsDuration() > MaxLeaseTimeout {
			return status.Error(codes.InvalidArgument, "hello.lease_timeout: want 1s to 12h, or none for the default")
		}
		lease = d.AsDuration()
	}
	s := &session{
		hub: h, id: newID(8), key: key, lanes: lanes, leaseTimeout: lease, stream: stream,
		credits: int(hello.GetCredits()), held: map[string]*delivery{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), refusalRoom: make(chan struct{}, maxRefusalsQueued),
	}
	s.log = h.cfg.Logger.With(slog.String("session", s.id), slog.String("worker", w.Name), slog.String("name", hello.GetName()))
	if err := stream.Send(&workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Welcome{Welcome: &workerv1.Welcome{
		Session: s.id, Lanes: lanes, LeaseTimeout: durationpb.New(lease),
	}}}); err != nil {
		return err
	}
	if err := h.add(s); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "pull worker connected", slog.Any("lanes", lanes), slog.Int("credits", s.credits))
	var sender sync.WaitGroup
	sender.Go(s.send)
	go s.receive()
	select {
	case <-s.done:
	case <-ctx.Done():
		s.end(nil)
	}
	// The sender stops at done; one blocked on a worker that does not read
	// is cut off when the stream ends, so wait only briefly.
	waited := make(chan struct{})
	go func() { sender.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(time.Second):
	}
	s.mu.Lock()
	err = s.endErr
	s.mu.Unlock()
	return err
}

// firstMessage reads the stream's first message, waiting at most
// helloTimeout, and no longer than the hub runs. (A client that opened a
// stream and sent nothing held it, and Connect's goroutine, for as long
// as its connection lasted, and a graceful stop of the server waited for
// it; found in review.)
func (h *Hub) firstMessage(stream workerv1.PullService_ConnectServer) (*workerv1.ConnectRequest, error) {
	type received struct {
		m   *workerv1.ConnectRequest
		err error
	}
	got := make(chan received, 1)
	// A Recv cannot be cut short: on a timeout it ends with the stream,
	// which ends when Connect returns.
	go func() {
		m, err := stream.Recv()
		got <- received{m, err}
	}()
	timeout := time.NewTimer(helloTimeout)
	defer timeout.Stop()
	select {
	case r := <-got:
		return r.m, r.err
	case <-timeout.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no Hello within %s of opening the stream: send it first", helloTimeout)
	case <-h.stop:
		return nil, errHubStopped
	}
}

// lanesFor resolves the lanes a worker asked for: each must exist here and
// be allowed by its key; none asked means every lane the key allows.
func (h *Hub) lanesFor(w *tenant.Worker, asked []string) ([]string, error) {
	if len(asked) == 0 {
		var out []string
		for _, l := range h.cfg.Lanes {
			if w.Serves(l) {
				out = append(out, l)
			}
		}
		if len(out) == 0 {
			return nil, status.Errorf(codes.PermissionDenied, "worker key %q may serve none of this drainer's lanes %v", w.Name, h.cfg.Lanes)
		}
		return out, nil
	}
	var out []string
	for _, l := range asked {
		switch {
		case !slices.Contains(h.cfg.Lanes, l):
			return nil, status.Errorf(codes.InvalidArgument, "hello.lanes: this drainer has no lane %q (it drains %v)", l, h.cfg.Lanes)
		case !w.Serves(l):
			return nil, status.Errorf(codes.PermissionDenied, "worker key %q may not serve lane %q (it may serve %v)", w.Name, l, w.Lanes)
		case !slices.Contains(out, l):
			out = append(out, l)
		}
	}
	return out, nil
}

func (s *session) serves(lane string) bool { return slices.Contains(s.lanes, lane) }

// free returns the credits s has free for a job of lane.
func (s *session) free(lane string, now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freeLocked(lane, now)
}

// offer ranks s for a job of lane (rank.better).
func (s *session) offer(lane string, now time.Time) rank {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank{free: s.freeLocked(lane, now), sending: !s.sendingSince.IsZero(), lanes: len(s.lanes)}
}

func (s *session) freeLocked(lane string, now time.Time) int {
	if !s.serves(lane) || s.ended || s.stalledLocked(now) {
		return 0
	}
	return s.credits - len(s.held)
}

// stalledLocked reports whether a send has blocked past the stall timeout.
func (s *session) stalledLocked(now time.Time) bool {
	return s.stalled || s.silent || (!s.sendingSince.IsZero() && now.Sub(s.sendingSince) > s.hub.cfg.StallTimeout)
}

// capacity returns the credits s offers the drainer and those its jobs
// use. A stalled session offers only what it holds, so no new job is
// granted for it. The credits of jobs given up are not offered: the
// worker still runs them, and the drainer no longer counts them.
func (s *session) capacity(now time.Time) (credits, used int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return 0, 0
	}
	credits, used = max(s.credits-s.givenUp, 0), len(s.held)-s.givenUp
	if s.stalledLocked(now) {
		return min(credits, used), used
	}
	return credits, used
}

// assign places d on s, if a credit is free. Checked again: s may have
// stalled since place looked.
func (s *session) assign(d *delivery, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freeLocked(d.lane, now) <= 0 {
		return false
	}
	s.seq++
	// Built in one buffer: FormatUint and the concatenation allocated a
	// string each, per job.
	var b [48]byte // the id (16 hex digits), a dot and at most 13 base-36 digits
	d.job.Lease = string(strconv.AppendUint(append(append(b[:0], s.id...), '.'), s.seq, 36))
	s.held[d.job.Lease] = d
	s.unsent = append(s.unsent, d)
	s.signal()
	return true
}

func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// forget takes d back unanswered (the drainer gave up on it); false if it
// was answered already. A job not sent yet frees its credit at once, for
// the deliveries waiting for one; one sent is marked given up and keeps
// its credit while the worker runs it.
func (s *session) forget(d *delivery) bool {
	s.mu.Lock()
	if s.held[d.job.Lease] != d {
		s.mu.Unlock()
		return false
	}
	i := slices.Index(s.unsent, d)
	if i < 0 {
		d.givenUp = true
		s.givenUp++
		s.mu.Unlock()
		s.hub.changed(false) // its credit is not offered
		return true
	}
	s.unsent = slices.Delete(s.unsent, i, i+1)
	delete(s.held, d.job.Lease)
	s.mu.Unlock()
	s.hub.wakePlacers()
	return true
}

// end ends the session once, handing back every job it holds.
func (s *session) end(err error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended, s.endErr = true, err
	unsent := s.unsent
	// The jobs given up are done with: the drainer has its answer.
	sent := slices.DeleteFunc(slices.Collect(maps.Values(s.held)), func(d *delivery) bool {
		return d.givenUp || slices.Contains(unsent, d)
	})
	s.held, s.unsent = nil, nil
	close(s.done)
	s.mu.Unlock()
	// The session leaves the hub before its unsent jobs are placed
	// again, though it takes none (ended).
	s.hub.remove(s)
	s.handBack(sent)
	takeBack(unsent)
	reason := "closed by the worker"
	if err != nil {
		reason = err.Error()
	}
	s.log.Info("pull worker disconnected", slog.Int("released", len(sent)), slog.Int("unsent", len(unsent)), slog.String("reason", reason))
}

// handBack answers deliveries taken from s unanswered after their jobs
// were sent: their jobs go back to their queues at once, with no attempt
// counted.
func (s *session) handBack(ds []*delivery) {
	perLane := map[string]int{}
	for _, d := range ds {
		d.result <- worker.ErrReleased
		perLane[d.lane]++
	}
	for lane, n := range perLane {
		s.hub.cfg.Metrics.PullReleased(lane, n)
	}
}

// takeBack answers deliveries taken from a session before their jobs
// were sent: Handle places them again.
func takeBack(ds []*delivery) {
	for _, d := range ds {
		d.result <- errUnsent
	}
}

// takeBackStuck takes from s, if its send has been under way for a sweep
// interval or more, the unsent jobs for which claim finds a credit free
// elsewhere, appends them to moved and returns it.
func (s *session) takeBackStuck(now time.Time, claim func(lane string) bool, moved []*delivery) []*delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.sendingSince.IsZero() || now.Sub(s.sendingSince) < sweepInterval {
		return moved
	}
	s.unsent = slices.DeleteFunc(s.unsent, func(d *delivery) bool {
		if !claim(d.lane) {
			return false
		}
		delete(s.held, d.job.Lease)
		moved = append(moved, d)
		return true
	})
	return moved
}

// send writes placed jobs, in batches, and refusals to the stream.
func (s *session) send() {
	for {
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
		// Let the deliveries that are ready to run place their jobs
		// first, so that they leave in one message: under load a wake
		// found one job, and each job cost a stream message of its own
		// (about 30 of 117 allocations per pulled job in
		// BenchmarkPullDrain). When nothing else is runnable this returns
		// at once, so an idle worker gets its job with no delay.
		runtime.Gosched()
		for {
			msgs := s.nextMessages()
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				if err := s.stream.Send(m); err != nil {
					s.end(err)
					return
				}
			}
			s.mu.Lock()
			now := s.hub.cfg.Now()
			for _, d := range s.sending {
				s.startLease(d, now)
			}
			s.sending = nil
			s.sendingSince = time.Time{}
			unstalled := s.stalled
			s.stalled = false
			s.mu.Unlock()
			if unstalled {
				s.log.Info("pull worker reads again")
				s.hub.changed(true)
			}
		}
	}
}

// nextMessages takes the refusals and a batch of unsent jobs, whose
// leases start when their send returns (send), and marks a send under
// way.
func (s *session) nextMessages() []*workerv1.ConnectResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	now := s.hub.cfg.Now()
	var msgs []*workerv1.ConnectResponse
	for _, r := range s.refusals {
		msgs = append(msgs, &workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Refused{Refused: r}})
		<-s.refusalRoom
	}
	s.refusals = s.refusals[:0]
	if len(s.unsent) > 0 {
		var jobs []*workerv1.Job
		size := 0
		for _, d := range s.unsent {
			js := proto.Size(d.job)
			if len(jobs) > 0 && size+js > maxBatchBytes {
				break
			}
			jobs, size = append(jobs, d.job), size+js
			s.sending = append(s.sending, d)
		}
		s.unsent = slices.Delete(s.unsent, 0, len(jobs))
		msgs = append(msgs, &workerv1.ConnectResponse{Message: &workerv1.ConnectResponse_Jobs{Jobs: &workerv1.Jobs{Jobs: jobs}}})
	}
	if len(msgs) > 0 {
		s.sendingSince = now
	}
	return msgs
}

// startLease starts d's lease, at now: its deadline moves to a lease
// timeout from now, unless an extend already set a later one. A job's
// lease starts when its send returns: one started when the send began
// ran on while the send blocked (a worker that paused reading), and a
// send blocked longer than the lease timeout failed an attempt for each
// of its jobs, and left the worker silent, before the worker had
// received any of them (found in review). It starts too when the stall
// timeout finds the send still blocked (sweep).
func (s *session) startLease(d *delivery, now time.Time) {
	d.deadline = later(d.deadline, now.Add(s.leaseTimeout))
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// receive reads the worker's messages until the stream ends.
func (s *session) receive() {
	for {
		m, err := s.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil // the worker closed its side: a clean end
			}
			s.end(err)
			return
		}
		s.onMessage(m)
	}
}

// onMessage carries out one message from the worker.
func (s *session) onMessage(m *workerv1.ConnectRequest) {
	switch msg := m.GetMessage().(type) {
	case *workerv1.ConnectRequest_Credits:
		n := msg.Credits.GetCredits()
		if n > MaxCredits {
			s.refuse("", codes.InvalidArgument, fmt.Sprintf("credits %d: at most %d", n, MaxCredits))
			return
		}
		s.mu.Lock()
		more := int(n) > s.credits
		s.credits = int(n)
		// The jobs placed and not yet sent beyond the new credits go
		// back at once, the last placed first: the worker asked for no
		// more than n (zero to drain, and a draining worker.Connect runs
		// no job that arrives later). They were sent all the same, and
		// such a worker left them held until its stream closed (found in
		// review).
		var back []*delivery
		if over := min(len(s.held)-s.credits, len(s.unsent)); over > 0 {
			back = slices.Clone(s.unsent[len(s.unsent)-over:])
			s.unsent = slices.Delete(s.unsent, len(s.unsent)-over, len(s.unsent))
			for _, d := range back {
				delete(s.held, d.job.Lease)
			}
		}
		s.mu.Unlock()
		takeBack(back)
		s.hub.changed(more)
	case *workerv1.ConnectRequest_Results:
		switch freed, offered := s.results(msg.Results.GetResults()); {
		case offered:
			s.hub.changed(true) // credits are offered again
		case freed:
			s.hub.wakePlacers()
		}
	case *workerv1.ConnectRequest_Hello:
		s.refuse("", codes.InvalidArgument, "Hello was already received: send it once, as the first message")
	default:
		s.refuse("", codes.InvalidArgument, "empty message: send Credits or Results")
	}
}

// results carries out a batch of results and reports whether a credit
// freed, and whether credits are offered to the drainer again: the
// session was silent (a lease had timed out) until this answer, or a job
// given up was answered (the answer is refused, and frees its credit).
func (s *session) results(rs []*workerv1.Result) (freed, offered bool) {
	now := s.hub.cfg.Now()
	type answer struct {
		d   *delivery
		err error
	}
	answers := make([]answer, 0, len(rs))
	var refusals []*workerv1.Refused
	refuse := func(lease string, code codes.Code, msg string) {
		refusals = append(refusals, &workerv1.Refused{Lease: lease, Code: uint32(code), Message: msg})
	}
	s.mu.Lock()
	// Any answer ends the silence, a refused one too: the late answer of
	// the lease that timed out is refused (no longer held), and is the
	// only one a worker whose every lease timed out can give
	// (worker.Connect sends it when its lease timer fires). Counting
	// accepted answers alone left such a worker with no job for good
	// (TestLeaseTimeoutAndExtend).
	recovered := s.silent
	s.silent = false
	givenUp := 0 // answers of jobs given up: refused, their credits freed
	for _, r := range rs {
		v, err := decodeResult(r)
		if err != nil {
			refuse(r.GetLease(), codes.InvalidArgument, err.Error())
			continue
		}
		d := s.held[r.GetLease()]
		if d == nil {
			refuse(r.GetLease(), codes.NotFound, "lease "+strconv.Quote(r.GetLease())+" is not held on this stream: "+
				"answered already, timed out, or from an earlier stream (its job was handed back and is redelivered)")
			continue
		}
		if slices.Contains(s.unsent, d) {
			// Placed and not sent yet: no worker has seen the job, so
			// the lease was guessed. Taken, an ack deleted a job never
			// run (found in review).
			refuse(r.GetLease(), codes.NotFound, "lease "+strconv.Quote(r.GetLease())+" was not sent on this stream yet: answer only the leases of jobs received")
			continue
		}
		if d.givenUp && r.GetOutcome() != workerv1.Outcome_OUTCOME_EXTEND {
			// The worker is done with a job the drainer gave up on. (An
			// extend moves its deadline, below: it runs on.)
			delete(s.held, r.GetLease())
			s.givenUp--
			givenUp++
			refuse(r.GetLease(), codes.NotFound, "lease "+strconv.Quote(r.GetLease())+" is no longer held: sluice gave up on its job "+
				"(a handler timeout, a shutdown or a lost queue lease) and redelivers it")
			continue
		}
		if r.GetOutcome() == workerv1.Outcome_OUTCOME_EXTEND {
			// A zero delay, like none, is the session's lease timeout
			// (worker.proto); taken as it came, it set the deadline to
			// now and the next sweep failed the job just extended.
			by := r.GetDelay().AsDuration()
			if by <= 0 {
				by = s.leaseTimeout
			}
			d.deadline = now.Add(by)
			continue
		}
		delete(s.held, r.GetLease())
		answers = append(answers, answer{d, v.err})
	}
	s.mu.Unlock()
	for _, a := range answers {
		a.d.result <- a.err
	}
	for _, r := range refusals {
		s.queueRefusal(r)
	}
	return len(answers)+givenUp > 0, recovered || givenUp > 0
}

// verdict is what a result tells the drainer: err nil acks, else a
// retryable or permanent failure.
type verdict struct{ err error }

// decodeResult checks a result and returns its verdict (EXTEND's is an
// ack's, and the caller handles it), or why the result is refused.
func decodeResult(r *workerv1.Result) (verdict, error) {
	if r.GetLease() == "" {
		return verdict{}, errors.New("result.lease is empty: name the job's lease")
	}
	if r.Delay != nil {
		if err := r.GetDelay().CheckValid(); err != nil || r.GetDelay().AsDuration() < 0 || r.GetDelay().AsDuration() > MaxLeaseTimeout {
			return verdict{}, errors.New("result.delay: want a duration of 0 to 12h")
		}
	}
	msg := r.GetError()
	switch r.GetOutcome() {
	case workerv1.Outcome_OUTCOME_ACK, workerv1.Outcome_OUTCOME_EXTEND:
		return verdict{}, nil
	case workerv1.Outcome_OUTCOME_RETRY:
		err := errors.New(cmp.Or(msg, "the worker asked for a retry"))
		if d := r.GetDelay().AsDuration(); d > 0 {
			return verdict{worker.RetryAfter(err, d)}, nil
		}
		return verdict{err}, nil
	case workerv1.Outcome_OUTCOME_FAIL:
		return verdict{worker.Permanent(errors.New(cmp.Or(msg, "the worker failed the job")))}, nil
	}
	return verdict{}, fmt.Errorf("result.outcome %v: want ACK, RETRY, FAIL or EXTEND", r.GetOutcome())
}

func (s *session) refuse(lease string, code codes.Code, msg string) {
	s.queueRefusal(&workerv1.Refused{Lease: lease, Code: uint32(code), Message: msg})
}

// queueRefusal queues r for the sender. While maxRefusalsQueued wait
// unsent it blocks, and with it the reading of the worker's messages: a
// worker that floods bad messages is slowed by its own stream's flow
// control, and served on.
func (s *session) queueRefusal(r *workerv1.Refused) {
	select {
	case s.refusalRoom <- struct{}{}:
	case <-s.done:
		return
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.refusals = append(s.refusals, r)
	s.mu.Unlock()
	s.signal()
}

// sweep fails leases past their deadline and, when a send has blocked past
// the stall timeout, hands back the jobs not yet sent.
func (s *session) sweep(now time.Time) {
	var expired, unsent []*delivery
	s.mu.Lock()
	for lease, d := range s.held {
		// A job not sent yet, or in a send still blocked, has no lease
		// running: no worker has it. If the sends stay blocked, the
		// stall check below hands back the first, and starts the
		// leases of the second.
		if !d.deadline.IsZero() && now.After(d.deadline) {
			expired = append(expired, d)
			delete(s.held, lease)
			if d.givenUp {
				s.givenUp--
			}
		}
	}
	if len(expired) > 0 && !s.silent {
		s.silent = true
		s.log.Warn("pull worker let leases time out; it gets no new jobs until it answers again", slog.Int("jobs", len(expired)))
	}
	if !s.stalled && !s.sendingSince.IsZero() && now.Sub(s.sendingSince) > s.hub.cfg.StallTimeout {
		s.stalled = true
		unsent = s.unsent
		s.unsent = nil
		for _, d := range unsent {
			delete(s.held, d.job.Lease)
		}
		// The jobs of the blocked send cannot be taken back: the
		// worker may yet read them. Their leases start now, so that a
		// worker that never reads again does not hold them for good.
		for _, d := range s.sending {
			s.startLease(d, now)
		}
		s.log.Warn("pull worker stopped reading; handing back its unsent jobs", slog.Int("jobs", len(unsent)))
	}
	s.mu.Unlock()
	for _, d := range expired {
		d.result <- fmt.Errorf("lease timed out: no answer or extend within %s", s.leaseTimeout)
	}
	takeBack(unsent)
}
