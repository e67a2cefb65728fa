package worker

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
	"github.com/sluice-dev/sluice/internal/errtext"
	"github.com/sluice-dev/sluice/internal/idlewait"
	"github.com/sluice-dev/sluice/internal/tlshint"
)

// Pull mode: the worker dials sluice (cmd/gateway or cmd/drainer, at their
// --worker-listen address) and pulls jobs over one Connect stream, so it
// needs no inbound port. See Connect.

// ConnectOptions configures Connect. The zero value is usable.
type ConnectOptions struct {
	// Concurrency is the most jobs run at once: the credits granted to
	// sluice. Defaults to 16.
	Concurrency int
	// Lanes to serve; empty serves every lane the key allows.
	Lanes []string
	// LeaseTimeout is how long a job may run without an answer or Extend
	// before sluice fails the attempt; zero takes the drainer's default
	// (15m). The handler's ctx ends then, with cause ErrLeaseTimedOut, and
	// Connect logs it: the job is redelivered. Connect does not extend
	// leases by itself: a handler that may run longer calls Extend.
	LeaseTimeout time.Duration
	// Name shows in sluice's logs; defaults to host/pid.
	Name string
	// TLS, when set, dials with TLS (a client certificate in it makes it
	// mTLS); nil dials in plaintext.
	TLS *tls.Config
	// DialOptions are added to the connection's (interceptors, say). The
	// connection pings sluice after 30s without traffic and reconnects
	// when no answer comes within 10s; a grpc.WithKeepaliveParams here
	// replaces that.
	DialOptions []grpc.DialOption
	// DrainTimeout bounds the graceful drain when ctx ends: running jobs
	// get this long to finish and be answered. Then their contexts are
	// cancelled: a handler that still returns nil (within 5s) is acked,
	// one that returns an error is not answered, and sluice hands its job
	// back with no attempt counted, as it does the job of a handler still
	// running 5s later, which Connect returns without. Defaults to 30s.
	DrainTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnSession, if set, is called with each stream's session id once it
	// is accepted.
	OnSession func(session string)
}

// Backoff between reconnects (see reconnectWait).
const (
	reconnectBase = 100 * time.Millisecond
	reconnectMax  = 3 * time.Second
)

const (
	resultBatch = 256
	maxJobBatch = 16 << 20       // sluice sends at most 1 MiB per batch
	maxDelay    = 12 * time.Hour // sluice refuses a result's longer delay
)

// Keepalive of the connection to sluice: a ping after keepaliveTime
// without traffic, and the connection counts as dead, so the stream ends
// and Connect reconnects, when no answer comes within keepaliveTimeout.
// Variables for the tests.
var (
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// cancelGrace is how long a stop that ran out of time (Connect's drain,
// Serve's grace) waits for the handlers it cancelled to return; it leaves
// the rest running. A variable for the tests.
var cancelGrace = 5 * time.Second

// ErrRefused is returned by Connect when sluice refuses the worker's key or
// Hello, or the connection's TLS cannot work until the worker's own
// settings change: retrying would not help.
var ErrRefused = errors.New("refused by sluice")

// Connect pulls jobs from the sluice process at addr, authenticating with
// a worker key, and runs handler on each, at most opts.Concurrency at once.
// It reconnects when the stream breaks, after a jittered wait that doubles
// from 100ms to at most 3s (back to 100ms after a session that held 3s),
// so it finds sluice again within a few seconds of a restart. Jobs a
// broken stream held are redelivered by sluice, and their handlers here
// are cancelled.
// Connect does not return while a handler it started runs, unless one
// still runs 5s after its context was cancelled.
//
// When ctx ends it drains gracefully: it asks for no more jobs, lets the
// running ones, and any still on their way, finish (up to
// opts.DrainTimeout) and answers them, then
// closes the stream and returns nil. It returns an error wrapping
// ErrRefused if sluice refuses the key or the Hello (a session ended by a
// reload that revoked or narrowed the key is tried again: that answers).
//
// A TLS failure is logged with what to change on each reconnect. One
// whose fix lies in the worker's own TLS settings ends Connect with
// ErrRefused, as a refused key does: its own client certificate expired
// or not yet valid, none given to a sluice that requires one, sluice's
// certificate signed by a CA the worker does not trust, TLS dialled to a
// plaintext listener, or plaintext to a TLS one (confirmed by a TLS probe
// of addr, as a stopping sluice or a proxy with no backend also closes
// the connection at once). One that sluice's side can heal while the
// worker waits is retried: sluice's certificate expired (it reloads a
// renewed one without a restart), the worker's certificate from a CA
// sluice does not take (sluice may be restarted with a new
// --tls-client-ca), or a connection closed after the handshake with the
// reason lost ("write: broken pipe"). Workers looped on all of these for
// ever, about half the lines naming nothing to change (found by a
// tester).
func Connect(ctx context.Context, addr, key string, handler Handler, opts ConnectOptions) error {
	if handler == nil {
		return errors.New("worker: Connect needs a handler")
	}
	opts.Concurrency = cmp.Or(opts.Concurrency, 16)
	opts.DrainTimeout = cmp.Or(opts.DrainTimeout, 30*time.Second)
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	if opts.Name == "" {
		host, _ := os.Hostname()
		opts.Name = host + "/" + strconv.Itoa(os.Getpid())
	}
	// gRPC sends only printable ASCII in metadata: a key with anything
	// else (a byte order mark at the start of its file) failed every
	// stream with INTERNAL, retried for ever.
	if key == "" || strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return errors.New("worker: the worker key is empty or holds white space, control characters or characters outside ASCII (trim the file it came from)")
	}
	if opts.Concurrency < 1 || opts.Concurrency > 10000 {
		return fmt.Errorf("worker: concurrency %d: want 1 to 10000", opts.Concurrency)
	}
	// The Hello carries them as protobuf strings, which must be UTF-8:
	// one that is not failed every session before it began, for ever.
	if !utf8.ValidString(opts.Name) {
		return fmt.Errorf("worker: ConnectOptions.Name %q is not valid UTF-8", opts.Name)
	}
	for _, l := range opts.Lanes {
		if !utf8.ValidString(l) {
			return fmt.Errorf("worker: lane %q in ConnectOptions.Lanes is not valid UTF-8", l)
		}
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxJobBatch)),
		// Find a dead connection: a sluice host that is lost (power, a
		// partition) sends no FIN, and an idle worker waited on its
		// stream for ever, reconnecting nowhere (found in review).
		// sluice's worker listener allows pings every 10s.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}, opts.DialOptions...)
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		return fmt.Errorf("worker: sluice address %q: %w", addr, err)
	}
	defer func() { _ = conn.Close() }()
	client := workerv1.NewPullServiceClient(conn)
	c := &puller{
		client: client, key: key, handler: handler, opts: opts, log: opts.Logger.With(slog.String("sluice", addr)),
		slots: make(chan struct{}, opts.Concurrency),
	}
	defer c.waitHandlers()
	var wait reconnectWait
	for {
		start := time.Now()
		welcomed, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		// Only a refusal of the key or the Hello is final. A session that
		// was welcomed and then ended with PERMISSION_DENIED lost its key
		// or one of its lanes in a reload: reconnecting asks again, and
		// is refused if the key is gone, or is served the lanes the key
		// still allows (Connect stopped for good on a narrowed key; found
		// in review).
		hint, final := tlsHint(err, opts.TLS)
		if !welcomed && opts.TLS == nil && hint != "" && speaksTLS(ctx, addr, opts.DialOptions) {
			hint, final = "sluice's --worker-listen serves TLS (it answered a TLS handshake): dial it with TLS (ConnectOptions.TLS; sluicectl worker --tls-ca)", true
		}
		if !welcomed && opts.TLS != nil && !final && tlshint.Classify(err.Error(), true) == tlshint.Dropped {
			if alert := alertAfterHandshake(ctx, addr, opts.TLS, opts.DialOptions); alert != nil {
				if h, f := tlsHint(alert, opts.TLS); h != "" && tlshint.Classify(alert.Error(), true) != tlshint.Dropped {
					hint, final = h, f
				}
			}
		}
		if st, ok := status.FromError(err); ok && !welcomed {
			switch {
			case final && st.Code() == codes.Unavailable:
				return fmt.Errorf("worker: %w: %s (%s)", ErrRefused, st.Message(), hint)
			case refusedCode(st.Code()):
				return fmt.Errorf("worker: %w: %s", ErrRefused, st.Message())
			case st.Code() == codes.Unimplemented:
				// Retrying a listener that serves no worker API would
				// spin for ever on a wrong address.
				return fmt.Errorf("worker: %w: %s does not serve the worker API (%s): connect to sluice's --worker-listen address (default 127.0.0.1:7072), not its ingest or admin one",
					ErrRefused, addr, st.Message())
			}
		}
		after := wait.next(welcomed, time.Since(start), jitter)
		attrs := []any{slog.Any("error", err), slog.Duration("after", after)}
		if hint != "" {
			attrs = append(attrs, slog.String("hint", hint))
		}
		c.log.WarnContext(ctx, "pull stream ended; reconnecting", attrs...)
		select {
		case <-time.After(after):
		case <-ctx.Done():
			return nil
		}
		redial(ctx, conn)
	}
}

// redialWait bounds redial's wait for the connection.
const redialWait = time.Second

// redial has gRPC dial sluice now if the connection is down, and waits up
// to redialWait for that dial's outcome. gRPC keeps a wait of its own between
// dials, growing to 2 minutes, and until a dial succeeds it fails calls at
// once with the last one's error: a worker whose sluice restarted stayed
// away for 10s and more after it was back.
func redial(ctx context.Context, conn *grpc.ClientConn) {
	if conn.GetState() != connectivity.TransientFailure {
		return // up, or idle: the next call dials
	}
	conn.ResetConnectBackoff()
	ctx, cancel := context.WithTimeout(ctx, redialWait)
	defer cancel()
	for s := conn.GetState(); s == connectivity.TransientFailure || s == connectivity.Connecting; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return
		}
	}
}

// reconnectWait is Connect's wait between sessions: it doubles from
// reconnectBase up to reconnectMax, so that sluice back from a restart
// is found within a few seconds, and starts again from reconnectBase
// after a session that held. Only after one that held: a session welcomed
// and broken at once would otherwise reconnect about ten times a second
// for ever (found in review). A refusal of the key or the Hello ends
// Connect instead of waiting. Each wait is jittered down by up to half,
// so that a fleet of workers does not reconnect in step.
type reconnectWait struct {
	ceiling time.Duration // of the next wait; zero before the first
}

// next returns the wait after a session that ended after lasting lasted
// (welcomed: sluice accepted it). jitter(d) returns a random duration from
// 0 to d.
func (w *reconnectWait) next(welcomed bool, lasted time.Duration, jitter func(time.Duration) time.Duration) time.Duration {
	if w.ceiling == 0 || welcomed && lasted >= reconnectMax {
		w.ceiling = reconnectBase
	}
	d := w.ceiling
	w.ceiling = min(2*w.ceiling, reconnectMax)
	return d - jitter(d/2)
}

// jitter returns a random duration from 0 to d.
func jitter(d time.Duration) time.Duration { return rand.N(d + 1) }

// tlsHint says what to fix when err looks like a TLS mismatch between the
// worker, dialling with cfg (nil: plaintext), and sluice's
// --worker-listen; final reports that only a change of the worker's own
// settings heals it (see Connect). The raw handshake errors it logged,
// over and over, named nothing to change (found in a walkthrough).
func tlsHint(err error, cfg *tls.Config) (hint string, final bool) {
	if err == nil {
		return "", false
	}
	var own *x509.Certificate // the worker's certificate, if out of date
	hasCert := false
	if cfg != nil {
		own = tlshint.OutOfDate(cfg.Certificates, time.Now())
		hasCert = len(cfg.Certificates) > 0 || cfg.GetClientCertificate != nil
	}
	switch tlshint.Diagnose(err.Error(), cfg != nil, own) {
	case tlshint.ServerWantsTLS:
		return "if sluice's --worker-listen serves TLS, dial it with TLS (ConnectOptions.TLS; sluicectl worker --tls-ca)", false
	case tlshint.ServerPlaintext:
		return "sluice's --worker-listen serves plain text: dial it without TLS", true
	case tlshint.UnknownAuthority:
		return "the CA given (--tls-ca) did not sign sluice's certificate (its --tls-cert)", true
	case tlshint.ClientCertRefused:
		if !hasCert {
			return "sluice takes only workers with a client certificate signed by a CA in its --tls-client-ca: give one (--tls-cert, --tls-key) from that CA", true
		}
		return "sluice did not take the worker's client certificate (--tls-cert): use one signed by a CA in its --tls-client-ca " +
			"(a Go client withholds a certificate whose CA sluice does not name)", false
	case tlshint.ClientCertExpired:
		if own != nil {
			return "the worker's client certificate (--tls-cert) " + tlshint.Validity(own, time.Now()) + ": give a current one", true
		}
		return "sluice refused the worker's client certificate (--tls-cert) as expired or not yet valid: give a current one, or check sluice's clock", true
	case tlshint.ServerCertExpired:
		return "sluice's certificate (its --tls-cert) has expired or is not yet valid: renew it there (it serves the new files within a second), or check this machine's clock", false
	case tlshint.Dropped:
		if !hasCert {
			return "sluice closed the connection after the TLS handshake, as it does a worker without a client certificate: " +
				"if it has --tls-client-ca, give the worker one a CA in it signed (--tls-cert, --tls-key)", false
		}
		return "sluice closed the connection after the TLS handshake, as it does a client certificate it refuses: " +
			"if it has --tls-client-ca, check that a CA in it signed the worker's --tls-cert", false
	}
	return "", false
}

// probeWait bounds speaksTLS.
const probeWait = 2 * time.Second

// speaksTLS reports whether addr, which closed a plaintext worker's
// connection before its first frame, answers a TLS handshake with a
// certificate: then the worker's missing TLS is the fault, not a sluice
// that is stopping or a proxy with no backend, which close connections
// the same way. The probe makes no call, and trusts the certificate only
// to see that one came.
func speaksTLS(ctx context.Context, addr string, dialOpts []grpc.DialOption) bool {
	var saw atomic.Bool
	probe := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // only to see whether a certificate comes; nothing is sent
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			saw.Store(len(raw) > 0)
			return nil
		},
	}
	conn, err := grpc.NewClient(addr, append(slices.Clone(dialOpts), grpc.WithTransportCredentials(credentials.NewTLS(probe)))...)
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); !saw.Load() && s != connectivity.Ready && s != connectivity.TransientFailure; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			break
		}
	}
	return saw.Load()
}

// alertAfterHandshake dials addr with cfg, as the worker does, completes
// the TLS handshake, writes nothing, and returns the error of a read of
// what sluice sends next within probeWait (nil if none came). A TLS 1.3
// server checks the client's certificate after the client's handshake
// has ended, so its refusal races with the worker's first write: when the
// write loses, the worker sees a broken pipe or a reset that names
// nothing, and it retried for ever a key that no retry could heal (found
// by CI). On a connection that writes nothing, the alert arrives intact.
func alertAfterHandshake(ctx context.Context, addr string, cfg *tls.Config, dialOpts []grpc.DialOption) error {
	got := make(chan error, 1)
	probe := alertProbe{TransportCredentials: credentials.NewTLS(cfg), got: got}
	conn, err := grpc.NewClient(addr, append(slices.Clone(dialOpts), grpc.WithTransportCredentials(probe))...)
	if err != nil {
		return nil
	}
	defer func() { _ = conn.Close() }()
	conn.Connect()
	select {
	case err := <-got:
		return err
	case <-time.After(2 * probeWait):
		return nil
	case <-ctx.Done():
		return nil
	}
}

// alertProbe is TLS credentials whose handshake, once done, reads what
// the server sends next and reports it, then fails the connection.
type alertProbe struct {
	credentials.TransportCredentials
	got chan<- error
}

var errProbed = errors.New("worker: probe connection, closed after its read")

func (p alertProbe) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, _, err := p.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		p.report(err)
		return nil, nil, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(probeWait))
	_, err = conn.Read(make([]byte, 1))
	var timeout net.Error
	if errors.As(err, &timeout) && timeout.Timeout() {
		err = nil // sluice took the handshake and waits for the worker
	}
	p.report(err)
	return nil, nil, errProbed
}

// report keeps the first result; grpc may retry the handshake.
func (p alertProbe) report(err error) {
	select {
	case p.got <- err:
	default:
	}
}

func refusedCode(c codes.Code) bool {
	return c == codes.Unauthenticated || c == codes.PermissionDenied || c == codes.InvalidArgument
}

type puller struct {
	client  workerv1.PullServiceClient
	key     string
	handler Handler
	opts    ConnectOptions
	log     *slog.Logger
	// slots holds a token per handler running, across sessions: at most
	// Concurrency run at once. Sluice sends no more jobs than the credits
	// free, but it frees a credit when a lease times out, and a session
	// after a reconnect grants them all again, while handlers that
	// ignore their cancelled context may still run (found in review). A
	// job that finds no slot waits for one; its lease is held by the
	// stream meanwhile.
	slots chan struct{}
	// handlers counts the handlers running, across sessions: Connect
	// waits for them before it returns. Those of a stream that broke
	// were cancelled and left running, and Connect returned without them
	// when ctx ended meanwhile (found in review).
	handlers sync.WaitGroup
	// leftRunning: a drain that timed out disconnected without handlers
	// that ignored their cancelled contexts for cancelGrace.
	leftRunning bool
}

// waitHandlers waits for the handlers still running, whose contexts have
// ended with their sessions, up to cancelGrace.
func (c *puller) waitHandlers() {
	if c.leftRunning {
		return // the drain waited for them already
	}
	done := make(chan struct{})
	go func() { c.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cancelGrace):
		c.log.Warn("handlers still running after cancellation: returning without them", slog.Duration("waited", cancelGrace))
	}
}

// extendKey carries a running job's extender in its handler's context.
type extendKey struct{}

// Extend tells sluice that the job whose handler ctx is given is still
// being worked on: its lease deadline moves to d from now (zero: the
// session's lease timeout; at most 12h). Outside a pull handler it does
// nothing.
func Extend(ctx context.Context, d time.Duration) {
	if r, ok := ctx.Value(extendKey{}).(*jobRun); ok {
		r.extend(d)
	}
}

// session runs one stream until it breaks or ctx ends (then drains).
// welcomed reports whether sluice accepted the session.
func (c *puller) session(ctx context.Context) (welcomed bool, err error) {
	streamCtx, cancelStream := context.WithCancel(metadata.AppendToOutgoingContext(context.WithoutCancel(ctx), "authorization", "Bearer "+c.key))
	defer cancelStream()
	// Until sluice welcomes the session, ctx ending ends the stream: there
	// is nothing to drain yet, and a server or proxy that accepts the
	// stream but never answers must not keep a shutdown waiting (found in
	// review). Once welcomed, ctx ending starts a graceful drain instead.
	unwatch := context.AfterFunc(ctx, cancelStream)
	defer unwatch()
	stream, err := c.client.Connect(streamCtx)
	if err != nil {
		return false, err
	}
	hello := &workerv1.Hello{Lanes: c.opts.Lanes, Credits: uint32(c.opts.Concurrency), Name: c.opts.Name}
	if c.opts.LeaseTimeout > 0 {
		hello.LeaseTimeout = durationpb.New(c.opts.LeaseTimeout)
	}
	if err := stream.Send(&workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		return false, recvErr(stream, err)
	}
	first, err := stream.Recv()
	if err != nil {
		return false, err
	}
	w := first.GetWelcome()
	if w == nil {
		return false, errors.New("sluice did not answer Hello with Welcome")
	}
	if !unwatch() {
		return false, ctx.Err() // ctx ended as the welcome came
	}
	log := c.log.With(slog.String("session", w.GetSession()))
	log.InfoContext(ctx, "pull worker connected", slog.Any("lanes", w.GetLanes()), slog.Int("concurrency", c.opts.Concurrency))
	if c.opts.OnSession != nil {
		c.opts.OnSession(w.GetSession())
	}

	// The lease timeout in force: a job's handler stops when its lease
	// times out. Zero: none given, no timer.
	leaseTimeout := w.GetLeaseTimeout().AsDuration()

	// Handlers of this stream stop when it breaks (their jobs are
	// redelivered) or when a drain runs out of time.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	// results is never closed: a handler's context may outlive the
	// session (Extend after a drain sent on a closed channel and panicked;
	// found in review). flush ends the sender instead, and the stream's
	// end does too (else it waited for ever after the stream broke, one
	// goroutine per reconnect).
	results := make(chan *workerv1.Result, c.opts.Concurrency+resultBatch)
	control := make(chan *workerv1.ConnectRequest, 1)
	flush := make(chan struct{})
	sendDone := make(chan error, 1)
	go func() { sendDone <- c.sendLoop(streamCtx, stream, results, control, flush) }()

	overdue := &overdueJobs{ids: map[string]string{}}
	running := handlers{all: &c.handlers, run: c.run, next: make(chan *jobRun), quit: make(chan struct{})}
	// Once the session ends no handler starts: Connect's wait for them
	// comes after.
	defer running.close()
	recvDone := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvDone <- err
				return
			}
			switch msg := m.GetMessage().(type) {
			case *workerv1.ConnectResponse_Jobs:
				for _, j := range msg.Jobs.GetJobs() {
					// A job that arrives once a drain has closed the
					// handlers is not run: it goes back when the stream
					// ends.
					running.start(&jobRun{job: j, log: log, overdue: overdue, sessionCtx: handlerCtx, leaseTimeout: leaseTimeout, results: results})
				}
			case *workerv1.ConnectResponse_Refused:
				logRefused(ctx, log, overdue, msg.Refused)
			}
		}
	}()

	select {
	case err := <-recvDone:
		cancelHandlers()
		return true, err
	case err := <-sendDone:
		cancelHandlers()
		return true, err
	case <-ctx.Done():
	}
	// Graceful drain: no more jobs, finish and answer the running ones.
	log.InfoContext(ctx, "draining: finishing the jobs held, then disconnecting")
	control <- &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Credits{Credits: &workerv1.Credits{Credits: 0}}}
	finished := make(chan struct{})
	go func() { running.closeAndWait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(c.opts.DrainTimeout):
		log.WarnContext(ctx, "drain timeout: cancelling running jobs (sluice redelivers them)")
		cancelHandlers()
		select {
		case <-finished:
		case <-time.After(cancelGrace):
			// A handler that ignores its context kept Connect, and the
			// process, from ever returning (found in review). Its job,
			// unanswered, goes back when the stream closes.
			log.WarnContext(ctx, "handlers still running after cancellation: disconnecting without them (sluice hands their jobs back)",
				slog.Duration("waited", cancelGrace))
			c.leftRunning = true
		}
	case err := <-recvDone:
		cancelHandlers()
		return true, err
	}
	close(flush) // the sender sends what is queued, closes its side and ends
	if err := <-sendDone; err != nil {
		return true, err
	}
	select {
	case <-recvDone:
	case <-time.After(5 * time.Second):
	}
	return true, nil
}

// handlers runs a stream's job handlers. A drain waits for the running
// ones; a job that arrives meanwhile (sluice sent it before it read the
// drain's Credits 0) is held all the same and is run too. Once none runs,
// the handlers are closed: a job that arrives later is not run, and goes
// back when the stream ends, at once. (Closed as the drain began, such a
// job was dropped and held by sluice until the drain ended; found in
// review.)
//
// A handler runs on a goroutine that, once it returns, waits a while for
// the next job (next), and ends when none comes or the handlers close
// (quit): a goroutine started per job, its stack grown to a handler's
// depth each time, was a fifth of the worker's CPU in BenchmarkPullDrain.
// Jobs are handed over as their *jobRun, which run takes, rather than as
// a closure over it: one allocation less per job.
type handlers struct {
	all      *sync.WaitGroup // the puller's, across sessions: handler goroutines
	run      func(*jobRun)   // runs one job: puller.run
	next     chan *jobRun    // to a goroutine waiting for its next job (unbuffered)
	quit     chan struct{}   // closed with closed: waiting goroutines end
	mu       sync.Mutex
	running  int
	draining bool
	closed   bool
	idle     chan struct{} // made by the drain, closed with closed
}

// handlerIdle is how long a handler goroutine waits for its next job
// before it ends.
const handlerIdle = time.Second

// start runs r unless the handlers are closed.
func (h *handlers) start(r *jobRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.running++
	select {
	case h.next <- r:
	default:
		h.all.Add(1)
		go h.loop(r)
	}
}

// loop runs r, then the jobs start hands it while it waits.
func (h *handlers) loop(r *jobRun) {
	defer h.all.Done()
	wait := idlewait.Waiter[*jobRun]{Idle: handlerIdle}
	defer wait.Stop()
	for {
		h.run(r)
		h.finish()
		var ok bool
		if r, ok = wait.Next(h.next, h.quit); !ok {
			return
		}
	}
}

// close starts no more handlers.
func (h *handlers) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		if h.draining {
			close(h.idle)
		}
		close(h.quit)
	}
	h.closed = true
}

func (h *handlers) finish() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running--
	h.closeIfIdleLocked()
}

func (h *handlers) closeIfIdleLocked() {
	if h.draining && h.running == 0 && !h.closed {
		h.closed = true
		close(h.idle)
		close(h.quit)
	}
}

// closeAndWait waits until no handler runs, running those that start
// meanwhile, then starts no more.
func (h *handlers) closeAndWait() {
	h.mu.Lock()
	if !h.draining {
		h.draining, h.idle = true, make(chan struct{})
	}
	h.closeIfIdleLocked()
	idle := h.idle
	h.mu.Unlock()
	<-idle
}

// recvErr returns the stream's status after a failed Send (which reports
// only io.EOF).
func recvErr(stream workerv1.PullService_ConnectClient, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.Recv(); rerr != nil {
			return rerr
		}
	}
	return err
}

// sendLoop is the stream's only sender: it batches results, and sends
// control messages. It returns when flush is closed (after sending the
// results queued and closing the stream's send side), when a send fails,
// or when the stream's ctx ends.
func (c *puller) sendLoop(ctx context.Context, stream workerv1.PullService_ConnectClient, results <-chan *workerv1.Result, control <-chan *workerv1.ConnectRequest, flush <-chan struct{}) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-control:
			if err := stream.Send(m); err != nil {
				return recvErr(stream, err)
			}
		case <-flush:
			for {
				select {
				case r := <-results:
					if err := c.sendResults(stream, r, results); err != nil {
						return err
					}
				default:
					return stream.CloseSend()
				}
			}
		case r := <-results:
			if err := c.sendResults(stream, r, results); err != nil {
				return err
			}
		}
	}
}

// sendResults sends r and the results queued behind it, up to a batch, in
// one message.
func (c *puller) sendResults(stream workerv1.PullService_ConnectClient, r *workerv1.Result, results <-chan *workerv1.Result) error {
	batch := []*workerv1.Result{r}
	// Let the handlers that are about to answer do so, so that their
	// results share a message (see pull's session.send).
	runtime.Gosched()
more:
	for len(batch) < resultBatch {
		select {
		case r := <-results:
			batch = append(batch, r)
		default:
			break more
		}
	}
	m := &workerv1.ConnectRequest{Message: &workerv1.ConnectRequest_Results{Results: &workerv1.Results{Results: batch}}}
	if err := stream.Send(m); err != nil {
		return recvErr(stream, err)
	}
	return nil
}

// ErrLeaseTimedOut is the cause (context.Cause) of a pull handler's ctx
// ending because its job's lease timed out with no answer or Extend:
// sluice has failed the attempt and redelivers the job.
var ErrLeaseTimedOut = errors.New("worker: the job's lease timed out with no answer or Extend: sluice failed the attempt and redelivers the job")

// leaseHint says how to keep a job's lease while its handler runs.
const leaseHint = "call worker.Extend(ctx, d) from the handler while it works, or give jobs a longer lease " +
	"(sluice's --worker-lease-timeout, or the worker's ConnectOptions.LeaseTimeout)"

// logRefused logs sluice's refusal of a message. NOT_FOUND refuses an
// answer or Extend of a lease sluice no longer holds: it timed out (here
// or at sluice first) or sluice gave up on the job; either way the
// attempt failed and the job is redelivered, so the refusal names the job
// when the lease timed out here, and says how to keep a lease.
func logRefused(ctx context.Context, log *slog.Logger, overdue *overdueJobs, r *workerv1.Refused) {
	code := codes.Code(r.GetCode())
	attrs := []any{slog.String("lease", r.GetLease()), slog.String("code", code.String()), slog.String("message", r.GetMessage())}
	if code != codes.NotFound {
		log.WarnContext(ctx, "sluice refused a message", attrs...)
		return
	}
	if id, ok := overdue.take(r.GetLease()); ok {
		attrs = append(attrs, slog.String("job_id", id))
	}
	attrs = append(attrs, slog.String("hint", leaseHint))
	log.WarnContext(ctx, "sluice refused an answer: it no longer holds the job's lease, so the attempt failed and the job is redelivered", attrs...)
}

// overdueMax bounds a session's overdueJobs.
const overdueMax = 1024

// overdueJobs names, by lease, the jobs of a session whose leases timed
// out here, for the refusals of their late answers. An entry goes with
// its refusal; one whose answer sluice took gets none, so at most
// overdueMax are kept, the oldest not necessarily first.
type overdueJobs struct {
	mu  sync.Mutex
	ids map[string]string // lease → job id
}

func (o *overdueJobs) add(lease, jobID string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.ids) >= overdueMax {
		for l := range o.ids {
			delete(o.ids, l)
			break
		}
	}
	o.ids[lease] = jobID
}

func (o *overdueJobs) take(lease string) (jobID string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	jobID, ok = o.ids[lease]
	delete(o.ids, lease)
	return jobID, ok
}

// run waits for a slot, runs the handler on one job and queues its
// result. The handler's ctx ends when the stream breaks, when a drain runs
// out of time, or when the job's lease times out (leaseTimeout after
// receipt, moved by each Extend): then sluice has failed the attempt and
// redelivers the job, and the handler should stop (its ctx ran on until
// the stream ended; found in review).
func (c *puller) run(r *jobRun) {
	j, log, sessionCtx, leaseTimeout := r.job, r.log, r.sessionCtx, r.leaseTimeout
	ctx, expire := context.WithCancelCause(sessionCtx)
	r.expire = expire
	defer expire(nil)
	if leaseTimeout > 0 {
		r.timer = time.AfterFunc(leaseTimeout, r.leaseEnded)
		defer r.timer.Stop()
	}
	defer r.returned.Store(true)
	ctx = context.WithValue(ctx, extendKey{}, r)
	r.ctx = ctx
	// The stream broke (sluice hands the job back), or the lease timed
	// out before a slot freed (answered as it did): the job is not run.
	// Looked at before a free slot is taken without a wait, the usual
	// case, in which no channel is made for ctx.Done.
	if ctx.Err() != nil {
		return
	}
	select {
	case c.slots <- struct{}{}:
	default:
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
	}
	defer func() { <-c.slots }()
	res, err := c.call(ctx, log, r.job.GetLease(), Job{
		ID: j.GetJobId(), Tenant: j.GetTenant(), Lane: j.GetLane(), Payload: j.GetPayload(),
		Attributes: j.GetAttributes(), Attempt: int(j.GetAttempt()), EnqueuedAt: j.GetEnqueuedAt().AsTime(),
		TraceContext: j.GetTraceContext(),
	})
	if err != nil && sessionCtx.Err() != nil {
		// Cancelled by the stream's break or the drain's timeout: the
		// failure is likely the cancellation, not the job's. Unanswered,
		// the job goes back when the stream ends, with no attempt
		// counted. (Answered at random before: a select raced the
		// cancellation; found in review.)
		return
	}
	if err != nil && errors.Is(context.Cause(ctx), ErrLeaseTimedOut) {
		return // the lease's end was answered
	}
	// A job done after its lease's end is answered all the same: the
	// ack is refused if sluice failed the attempt, taken if not.
	answer(sessionCtx, r.results, res)
}

// jobRun is one job's state while run runs it: its lease timer, and its
// extender, which Extend finds in the handler's ctx: one allocation, and
// one more for its leaseEnded method value, where two closures and the
// variables they captured were four.
type jobRun struct {
	job          *workerv1.Job // its lease names it to sluice
	log          *slog.Logger  // the session's
	overdue      *overdueJobs  // the session's
	sessionCtx   context.Context
	ctx          context.Context // the handler's
	expire       context.CancelCauseFunc
	timer        *time.Timer // nil without a lease timeout
	leaseTimeout time.Duration
	results      chan<- *workerv1.Result
	returned     atomic.Bool // run returned: the job was answered, or given up with the stream
}

// leaseEnded runs when the job's lease times out with no answer or
// Extend.
func (r *jobRun) leaseEnded() {
	if r.returned.Load() {
		return // answered, or given up with the stream
	}
	r.expire(ErrLeaseTimedOut)
	// The handler may not say so (its ctx ended, it returns), and sluice
	// only logs it: the worker showed nothing while its jobs burned their
	// attempts one lease timeout after another.
	r.log.Warn("a job's lease timed out before its handler finished: sluice fails this attempt and redelivers the job",
		slog.String("job_id", r.job.GetJobId()), slog.Int("attempt", int(r.job.GetAttempt())), slog.String("lease", r.job.GetLease()),
		slog.Duration("lease_timeout", r.leaseTimeout), slog.String("hint", leaseHint))
	r.overdue.add(r.job.GetLease(), r.job.GetJobId())
	// Answered now, not when the handler returns: after a lease timed out
	// sluice sends the worker no job until it answers again, and a
	// handler that ignores its ctx left all the worker's other slots idle
	// for good (found in review). The answer is refused if sluice failed
	// the attempt already, and takes its place if not.
	answer(r.sessionCtx, r.results, &workerv1.Result{Lease: r.job.GetLease(), Outcome: workerv1.Outcome_OUTCOME_RETRY, Error: ErrLeaseTimedOut.Error()})
}

// extend asks sluice to move the job's lease deadline to d from now (zero
// or less: the session's lease timeout), and moves the timer likewise.
func (r *jobRun) extend(d time.Duration) {
	d = min(d, maxDelay) // sluice refuses longer (found in review)
	m := &workerv1.Result{Lease: r.job.GetLease(), Outcome: workerv1.Outcome_OUTCOME_EXTEND}
	if d > 0 {
		m.Delay = durationpb.New(d)
	}
	select {
	case r.results <- m:
	case <-r.ctx.Done():
		return
	}
	// As sluice moves the deadline: zero or less is the lease timeout.
	switch {
	case r.timer == nil:
	case d > 0:
		r.timer.Reset(d)
	default:
		r.timer.Reset(r.leaseTimeout)
	}
}

// answer queues r for the sender. A job that finished is answered
// whenever the stream can still carry it (a drain that timed out sends
// what is queued), so it is not delivered again: a select alone dropped
// the ack at random once ctx had ended.
func answer(ctx context.Context, results chan<- *workerv1.Result, r *workerv1.Result) {
	select {
	case results <- r:
		return
	default:
	}
	select {
	case results <- r:
	case <-ctx.Done(): // the stream broke: sluice has handed the job back already
	}
}

// call runs the handler and returns its error and the job's result,
// turning a panic into a retryable error. The result is made under the
// recover too: an error whose Error method panics (a typed nil pointer)
// crashed the worker process (found in review).
func (c *puller) call(ctx context.Context, log *slog.Logger, lease string, job Job) (r *workerv1.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.ErrorContext(ctx, "handler panicked", slog.String("job_id", job.ID), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			err = fmt.Errorf("panic: %v", p)
			r = resultOf(lease, err)
		}
	}()
	err = c.handler(ctx, job)
	return resultOf(lease, err), err
}

// errorTextMax bounds the error text a worker answers with, in a Result
// or a status; sluice keeps the first 1 KiB of it with the job.
const errorTextMax = 4 << 10

// errorText is err's message as a worker answers it. An answer that
// could not be sent was lost with others: a Result that could not be
// encoded broke the stream, and every answer in its batch; a status over
// the drainer's trailer limit broke the connection. Either way the job
// went back with no attempt counted and failed so again, for ever. So
// the message is made valid UTF-8 (protobuf strings must be), and cut to
// errorTextMax bytes, marked (found in review).
func errorText(err error) string { return errtext.Cut(err, errorTextMax) }

// resultOf turns a handler's error into the job's result, as the status
// table does for push workers: nil acks, Permanent fails, RetryAfter
// retries no sooner than its delay, anything else retries.
func resultOf(lease string, err error) *workerv1.Result {
	r := &workerv1.Result{Lease: lease, Outcome: workerv1.Outcome_OUTCOME_ACK}
	if err == nil {
		return r
	}
	r.Error = errorText(err)
	if IsPermanent(err) {
		r.Outcome = workerv1.Outcome_OUTCOME_FAIL
		return r
	}
	r.Outcome = workerv1.Outcome_OUTCOME_RETRY
	var ra *RetryAfterError
	if errors.As(err, &ra) && ra.After > 0 {
		// Sluice refuses a delay past 12h as malformed, and the job then
		// waited out its lease; the drainer caps delays at 900s anyway
		// (found in review).
		r.Delay = durationpb.New(min(ra.After, maxDelay))
	}
	return r
}
