package ctl

import (
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/adminview"
	"github.com/sluice-dev/sluice/internal/cliconn"
	"github.com/sluice-dev/sluice/internal/flagconf"
	"github.com/sluice-dev/sluice/internal/tlsflags"
	"github.com/sluice-dev/sluice/internal/tlshint"
)

// adminFlags are the connection flags every admin command takes.
type adminFlags struct {
	addr, key, dataDir string
	json               bool
	timeout            time.Duration
	tls                tlsflags.Client
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.addr, "admin-addr", envOr("SLUICE_ADMIN_ADDR", "127.0.0.1:7071"), "admin API address (or SLUICE_ADMIN_ADDR)")
	// Keys read from the environment are not flag defaults: --help and
	// every flag mistake print the defaults (see keyFromEnv).
	fs.StringVar(&a.key, "admin-key", "", "admin API key (or SLUICE_ADMIN_KEY; default: the file <data-dir>/admin-key)")
	fs.StringVar(&a.dataDir, "data-dir", "data", "where to find admin-key when --admin-key is not given")
	fs.BoolVar(&a.json, "json", false, "print the API's answer as JSON instead of a table")
	flagconf.DurationVar(fs, &a.timeout, "timeout", 30*time.Second, "timeout of each call")
	a.tls.Register(fs, "", "the admin API")
}

// admin is a connected admin client.
type admin struct {
	*adminFlags
	out    io.Writer
	client adminv1.AdminServiceClient
	ctx    context.Context
}

// connect resolves the key and dials the admin API; close the returned
// function when done.
func (a *adminFlags) connect(ctx context.Context, out io.Writer) (*admin, func(), error) {
	key := keyFromEnv(a.key, "SLUICE_ADMIN_KEY")
	if key == "" {
		// A file that is there but unreadable or empty is named as such:
		// "run where it exists" sent the operator looking for a file
		// that was there (found in review).
		file := filepath.Join(a.dataDir, "admin-key")
		b, err := os.ReadFile(file)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("no admin key: pass --admin-key, set SLUICE_ADMIN_KEY, or run where %s exists (or point --data-dir at the gateway's)", file)
		case err != nil:
			return nil, nil, fmt.Errorf("no admin key: cannot read %s (%w); pass --admin-key or set SLUICE_ADMIN_KEY instead", file, err)
		}
		if key = strings.TrimSpace(string(b)); key == "" {
			return nil, nil, fmt.Errorf("no admin key: %s is empty; pass --admin-key, set SLUICE_ADMIN_KEY, or point --data-dir at the gateway's", file)
		}
	}
	conn, err := cliconn.Dial(a.addr, "--admin-addr", key, a.tls)
	if err != nil {
		return nil, nil, err
	}
	c := &admin{adminFlags: a, out: out, client: adminv1.NewAdminServiceClient(conn), ctx: ctx}
	return c, func() { _ = conn.Close() }, nil
}

// call returns a context for one call.
func (c *admin) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.timeout)
}

// adminCommand builds a command's setup from its own flags and body.
func adminCommand(own func(fs *flag.FlagSet), body func(c *admin, e *env, args []string) error) func(fs *flag.FlagSet) runFunc {
	return func(fs *flag.FlagSet) runFunc {
		var a adminFlags
		a.register(fs)
		if own != nil {
			own(fs)
		}
		return func(ctx context.Context, e *env, args []string) error {
			c, done, err := a.connect(ctx, e.stdout)
			if err != nil {
				return err
			}
			defer done()
			return body(c, e, args)
		}
	}
}

// keyFromEnv returns flagValue, or if it is empty the environment
// variable env. A key flag's default was the variable's value, and the
// flag package prints defaults: "sluicectl stats --help", or any mistyped
// flag, printed the admin key (tenant and worker keys likewise) to the
// terminal and whatever log captured it.
func keyFromEnv(flagValue, env string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(env)
}

// tlsHint adds what to fix when a connection failed because client and
// server disagree about TLS. gRPC says only "error reading server
// preface: EOF" (plaintext to a TLS server) or "first record does not
// look like a TLS handshake" (the other way), and the error asked whether
// the server was running, which it was.
func tlsHint(msg string, c tlsflags.Client) string {
	on := c != (tlsflags.Client{})
	// A certificate out of its validity, the client's or the server's:
	// an expired --tls-cert was told to check the server's CA, its alert
	// lost to "write: broken pipe" (found by a tester).
	var own *x509.Certificate
	if c.CertFile != "" {
		own = tlshint.FileOutOfDate(c.CertFile, time.Now())
	}
	switch tlshint.Diagnose(msg, on, own) {
	case tlshint.ClientCertExpired:
		if own != nil {
			return "; --tls-cert " + tlshint.Validity(own, time.Now()) + ": give a current certificate"
		}
		return "; it refused --tls-cert as expired or not yet valid: give a current certificate (or check the server's clock)"
	case tlshint.ServerCertExpired:
		return "; its certificate (its --tls-cert) has expired or is not yet valid: renew it there (it serves the new files within a second), or check this machine's clock"
	}
	switch {
	case !on && strings.Contains(msg, "error reading server preface"):
		return "; if it serves TLS, add --tls-ca (or --tls, for a certificate the system trusts)"
	case on && strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "; it serves plaintext: leave out the --tls flags"
	case strings.Contains(msg, "remote error: tls: certificate required") && c.CertFile != "":
		// The client sends its certificate only if the server names its
		// CA among those it accepts: a certificate from another CA is
		// not sent at all (found in a walkthrough, where the hint said to
		// add the --tls-cert that was given).
		return "; it did not take --tls-cert: use a certificate signed by a CA in its " + clientCAFlags
	case strings.Contains(msg, "remote error: tls: certificate required"):
		return "; it takes only clients with a certificate (mutual TLS): add --tls-cert and --tls-key"
	case on && (strings.Contains(msg, "broken pipe") || strings.Contains(msg, "connection reset by peer") || strings.HasSuffix(msg, "EOF")):
		// A server that refuses a client's certificate, or its lack of
		// one, closes the connection; its alert is lost when the client
		// writes first.
		if c.CertFile == "" {
			return "; if it takes only clients with a certificate (mutual TLS), add --tls-cert and --tls-key"
		}
		return "; if it takes only clients with a certificate (mutual TLS), check that a CA in its " + clientCAFlags + " signed --tls-cert"
	case strings.Contains(msg, "remote error: tls: bad certificate"), strings.Contains(msg, "remote error: tls: unknown certificate authority"):
		return "; it does not trust --tls-cert: use a certificate signed by a CA in its " + clientCAFlags
	}
	return ""
}

// clientCAFlags names the server's flags that say which CAs sign the
// client certificates it takes.
const clientCAFlags = "--tls-client-ca (the admin listener's: --admin-tls-client-ca, when set)"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// explain turns an admin RPC error into a message that says what to fix.
func (c *admin) explain(err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		if cliconn.Reached(err) {
			return fmt.Errorf("the admin API at %s could not do it now: %s (its queue backend failed or it is stopping; try again, and see that process's log)", c.addr, st.Message())
		}
		return fmt.Errorf("cannot reach the admin API at %s (is the gateway or drainer running, and is --admin-addr right?): %s%s", c.addr, st.Message(), tlsHint(st.Message(), c.tls))
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("the admin API refused the credential: %s (use the admin key from <data-dir>/admin-key, not a tenant key; "+
			"and check that --admin-addr %s is the admin API's address, --admin-listen, not the ingest or worker one)", st.Message(), c.addr)
	case codes.Unimplemented:
		return fmt.Errorf("%s does not serve the admin API (%s): give --admin-addr the gateway's or drainer's --admin-listen address (default 127.0.0.1:7071)", c.addr, st.Message())
	case codes.DeadlineExceeded:
		// It named no flag (found in review).
		return fmt.Errorf("no answer from the admin API within --timeout %s (%s): give a longer --timeout; a replay or dry run it started goes on (sluicectl dlq status lists them)", c.timeout, st.Message())
	}
	return describe(st)
}

// describe renders a status with its details, one per line.
func describe(st *status.Status) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", st.Code(), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				fmt.Fprintf(&b, "\n  field %s: %s", v.GetField(), v.GetDescription())
			}
		case *errdetails.RetryInfo:
			fmt.Fprintf(&b, "\n  retry after %s", d.GetRetryDelay().AsDuration())
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				fmt.Fprintf(&b, "\n  quota %s: %s", v.GetSubject(), v.GetDescription())
			}
		}
	}
	return errors.New(b.String())
}

// printJSON prints m as protobuf JSON, indented the same way every time
// (protojson varies its spacing on purpose; scripts may compare output).
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

func setupStats(fs *flag.FlagSet) runFunc {
	return adminCommand(nil, func(c *admin, _ *env, args []string) error {
		if err := wantArgs(args, 0, "stats takes no arguments"); err != nil {
			return err
		}
		ctx, cancel := c.call()
		defer cancel()
		resp, err := c.client.GetQueueStats(ctx, &adminv1.GetQueueStatsRequest{})
		if err != nil {
			return c.explain(err)
		}
		if c.json {
			for _, q := range resp.GetQueues() {
				if q.GetOldestAge().AsDuration() <= 0 {
					q.OldestAge = nil // left out, as protojson leaves out the counts that are 0
				}
			}
			return printJSON(c.out, resp)
		}
		tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "QUEUE\tLANE\tKIND\tVISIBLE\tIN FLIGHT\tDELAYED\tOLDEST\t")
		for _, q := range resp.GetQueues() {
			kind := q.GetKind()
			if q.GetRetired() {
				kind += " (retired)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t\n", q.GetQueue(), q.GetLane(), kind, q.GetVisible(), q.GetInFlight(), q.GetDelayed(), oldestAge(q))
		}
		return tw.Flush()
	})(fs)
}

// oldestAge shows a queue's oldest-message age, or "—" when there is none
// to show, as the web console does: the age is 0 when the queue is empty
// or the backend cannot tell. SQS never can (it has no such attribute),
// and its queues all showed 0s, jobs waiting or not (found in a
// walkthrough).
func oldestAge(q *adminv1.QueueStats) string {
	d := q.GetOldestAge().AsDuration()
	if d <= 0 {
		return "—"
	}
	return d.Round(time.Second).String()
}

func setupLimits(fs *flag.FlagSet) runFunc {
	return adminCommand(nil, func(c *admin, _ *env, args []string) error {
		if err := wantArgs(args, 1, "give the tenant whose limits to show, e.g. sluicectl limits acme"); err != nil {
			return err
		}
		ctx, cancel := c.call()
		defer cancel()
		resp, err := c.client.GetTenantLimits(ctx, &adminv1.GetTenantLimitsRequest{Tenant: args[0]})
		if err != nil {
			return c.explain(err)
		}
		if c.json {
			return printJSON(c.out, resp)
		}
		l, v := resp.GetLimits(), resp.GetConfig()
		source := "built-in development config"
		if v.GetPath() != "" {
			source = fmt.Sprintf("%s (sha256 %.12s)", v.GetPath(), v.GetSha256())
		}
		tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "tenant\t%s (tier %s, lane %s)\n", resp.GetTenant(), resp.GetTier(), l.GetLane())
		fmt.Fprintf(tw, "submit\t%g jobs/s, burst %d, refused above %.0f%% of the lane's high-water mark\n", l.GetSubmitRate(), l.GetSubmitBurst(), l.GetHwmFraction()*100)
		fmt.Fprintf(tw, "fair rate\t%g jobs/s, burst %d (past it: served after the others, never held back while workers are free)\n", l.GetDrainRate(), l.GetDrainBurst())
		fmt.Fprintf(tw, "share\tweight %s, guaranteed %.0f%% of the delivery slots\n", weightText(l.GetWeight()), l.GetMinShare()*100)
		fmt.Fprintf(tw, "ceilings\t%s\n", ceilingsText(l))
		fmt.Fprintf(tw, "payload\tat most %d bytes\n", l.GetMaxPayloadBytes())
		fmt.Fprintf(tw, "config\t%s, loaded %s\n", source, v.GetLoadedAt().AsTime().UTC().Format(time.RFC3339))
		return tw.Flush()
	})(fs)
}

// filterFlags are the DLQ filter flags of list, show and replay.
type filterFlags struct {
	lanes, tenants, after, before, reason string
	allTenants                            bool
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.lanes, "lane", "", "comma-separated lanes (default: all)")
	fs.StringVar(&f.tenants, "tenant", "", "comma-separated tenants")
	fs.BoolVar(&f.allTenants, "all-tenants", false, "match every tenant (a replay needs --tenant or this)")
	fs.StringVar(&f.after, "since", "", "jobs accepted at or after this time (RFC 3339, or a duration ago such as 2h)")
	fs.StringVar(&f.before, "until", "", "jobs accepted before this time (RFC 3339, or a duration ago)")
	fs.StringVar(&f.reason, "reason", "", "dead-letter reason prefix, e.g. attempts_exhausted")
}

func (f *filterFlags) build(now time.Time) (*adminv1.DLQFilter, error) {
	out := &adminv1.DLQFilter{Lanes: splitList(f.lanes), Tenants: splitList(f.tenants), AllTenants: f.allTenants, ReasonPrefix: f.reason}
	var err error
	if out.EnqueuedAfter, err = parseWhen("--since", f.after, now); err != nil {
		return nil, err
	}
	if out.EnqueuedBefore, err = parseWhen("--until", f.before, now); err != nil {
		return nil, err
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseWhen(flagName, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return timestamppb.New(t), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return timestamppb.New(now.Add(-d)), nil
	}
	return nil, fmt.Errorf("%s %q: want an RFC 3339 time (2026-11-23T10:00:00Z) or a duration ago (90m)", flagName, v)
}

func setupDLQList(fs *flag.FlagSet) runFunc {
	var ff filterFlags
	var pageSize, preview int
	var page string
	return adminCommand(func(fs *flag.FlagSet) {
		ff.register(fs)
		fs.IntVar(&pageSize, "limit", 50, "jobs per page (1-500)")
		fs.StringVar(&page, "page", "", "page token from a previous listing with the same filter flags")
		fs.IntVar(&preview, "preview", 64, "payload bytes to show (0-4096)")
	}, func(c *admin, _ *env, args []string) error {
		if err := wantArgs(args, 0, "dlq list takes flags only (to see one job: sluicectl dlq show JOB_ID)"); err != nil {
			return err
		}
		// Checked here: a value past int32 wrapped to a small valid one.
		switch {
		case pageSize < 1 || pageSize > 500:
			return fmt.Errorf("--limit %d: give 1 to 500 jobs per page", pageSize)
		case preview < 0 || preview > 4096:
			return fmt.Errorf("--preview %d: give 0 to 4096 payload bytes", preview)
		}
		f, err := ff.build(time.Now())
		if err != nil {
			return err
		}
		ctx, cancel := c.call()
		defer cancel()
		resp, err := c.client.ListDLQ(ctx, &adminv1.ListDLQRequest{Filter: f, PageSize: int32(pageSize), PageToken: page, PreviewBytes: int32(preview)})
		if err != nil {
			return c.explain(err)
		}
		if preview == 0 {
			// The API reads preview_bytes 0 as its default (64): --preview
			// 0 printed the payloads it was given to hide.
			for _, j := range resp.GetJobs() {
				j.PayloadPreview = nil
			}
		}
		if c.json {
			return printJSON(c.out, resp)
		}
		tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB ID\tTENANT\tLANE\tREASON\tLAST ERROR\tATTEMPTS\tACCEPTED\tBYTES\tPAYLOAD")
		for _, j := range resp.GetJobs() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", adminview.Printable(j.GetJobId()), adminview.Printable(j.GetTenant()), j.GetLane(),
				adminview.Cut(adminview.Printable(adminview.ShortReason(j)), 40), adminview.Cut(adminview.Printable(j.GetLastError()), 60), j.GetAttempts(),
				accepted(j.GetEnqueuedAt()), j.GetPayloadBytes(), strconv.Quote(string(j.GetPayloadPreview())))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(resp.GetJobs()) == 0 {
			fmt.Fprintln(c.out, "(no dead-lettered jobs match)")
		}
		if t := resp.GetNextPageToken(); t != "" {
			fmt.Fprintf(c.out, "more: the same command with --page %s\n", t)
		}
		return nil
	})(fs)
}

// accepted is a dead letter's acceptance time, or "-" for a malformed one
// that has none (it showed as 1970-01-01T00:00:00Z).
func accepted(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// dlqPageMax and dlqPreviewMax are the admin API's largest page and
// payload preview.
const (
	dlqPageMax    = 500
	dlqPreviewMax = 4096
)

// FindDeadLetter pages through the DLQs matching filter for the job with
// id, with the largest payload preview the API gives.
func FindDeadLetter(ctx context.Context, client adminv1.AdminServiceClient, filter *adminv1.DLQFilter, id string) (*adminv1.DeadLetter, error) {
	token := ""
	for {
		resp, err := client.ListDLQ(ctx, &adminv1.ListDLQRequest{Filter: filter, PageSize: dlqPageMax, PageToken: token, PreviewBytes: dlqPreviewMax})
		if err != nil {
			return nil, err
		}
		for _, j := range resp.GetJobs() {
			if j.GetJobId() == id {
				return j, nil
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil, nil
		}
	}
}

func setupDLQShow(fs *flag.FlagSet) runFunc {
	var lanes string
	return adminCommand(func(fs *flag.FlagSet) {
		fs.StringVar(&lanes, "lane", "", "comma-separated lanes to look in (default: all)")
	}, func(c *admin, _ *env, args []string) error {
		if err := wantArgs(args, 1, "give the job id to show (sluicectl dlq list shows them)"); err != nil {
			return err
		}
		ctx, cancel := c.call()
		defer cancel()
		j, err := FindDeadLetter(ctx, c.client, &adminv1.DLQFilter{Lanes: splitList(lanes)}, args[0])
		if err != nil {
			return c.explain(err)
		}
		if j == nil {
			return fmt.Errorf("job %q is not in a dead-letter queue (replayed, or never dead-lettered? sluicectl dlq list shows what is)", args[0])
		}
		if c.json {
			return printJSON(c.out, j)
		}
		tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "job\t%s\n", adminview.Printable(j.GetJobId()))
		fmt.Fprintf(tw, "tenant\t%s\n", adminview.Printable(j.GetTenant()))
		fmt.Fprintf(tw, "lane\t%s (queue %s)\n", j.GetLane(), j.GetQueue())
		fmt.Fprintf(tw, "reason\t%s\n", adminview.Printable(adminview.ShortReason(j)))
		le := j.GetLastError()
		if le == "" {
			le = "(none recorded)"
		}
		fmt.Fprintf(tw, "last error\t%s\n", adminview.Printable(le))
		fmt.Fprintf(tw, "attempts\t%d\n", j.GetAttempts())
		if at := j.GetEnqueuedAt(); at != nil {
			fmt.Fprintf(tw, "accepted\t%s\n", at.AsTime().UTC().Format(time.RFC3339Nano))
		}
		for _, k := range sortedKeys(j.GetAttributes()) {
			fmt.Fprintf(tw, "attribute\t%s=%s\n", adminview.Printable(k), adminview.Printable(j.GetAttributes()[k]))
		}
		shown := ""
		if n := int64(len(j.GetPayloadPreview())); n < j.GetPayloadBytes() {
			shown = fmt.Sprintf(", first %d shown", n)
		}
		fmt.Fprintf(tw, "payload\t%d bytes%s: %s\n", j.GetPayloadBytes(), shown, strconv.Quote(string(j.GetPayloadPreview())))
		return tw.Flush()
	})(fs)
}

func setupDLQReplay(fs *flag.FlagSet) runFunc {
	var ff filterFlags
	var dryRun, noWait bool
	var maxJobs int64
	var rate float64
	return adminCommand(func(fs *flag.FlagSet) {
		ff.register(fs)
		fs.BoolVar(&dryRun, "dry-run", false, "report what would move without moving anything")
		fs.Int64Var(&maxJobs, "max", 0, "stop after this many jobs (0: all)")
		fs.Float64Var(&rate, "rate", 0, "jobs per second (default 100)")
		fs.BoolVar(&noWait, "no-wait", false, "start the replay and print its id without following it")
	}, func(c *admin, e *env, args []string) error {
		if err := wantArgs(args, 0, "dlq replay takes flags only: --tenant T (or --all-tenants), --dry-run, …"); err != nil {
			return err
		}
		if len(splitList(ff.tenants)) == 0 && !ff.allTenants {
			// Said here in the CLI's words; the API names its fields.
			return errors.New("say whose jobs to replay: --tenant T1,T2, or --all-tenants for every tenant's (a replay of everything is never the default)")
		}
		f, err := ff.build(time.Now())
		if err != nil {
			return err
		}
		return c.replay(&adminv1.ReplayDLQRequest{Filter: f, DryRun: dryRun, MaxJobs: maxJobs, RatePerSecond: rate}, noWait, e.stderr)
	})(fs)
}

func (c *admin) replay(req *adminv1.ReplayDLQRequest, noWait bool, progress io.Writer) error {
	ctx, cancel := c.call()
	resp, err := c.client.ReplayDLQ(ctx, req)
	cancel()
	if err != nil {
		return c.explain(err)
	}
	r := resp.GetReplay()
	if req.GetDryRun() || noWait {
		if c.json {
			// The JSON, and the exit status the text would have had: a
			// failed dry run exited 0 with --json (found in review).
			return cmp.Or(printJSON(c.out, r), replayOutcome(r))
		}
		if req.GetDryRun() {
			if err := replayOutcome(r); err != nil {
				return err
			}
			fmt.Fprintln(c.out, "dry run: "+adminview.DryRunSummary(r, "--max"))
			if n := r.GetMalformed(); n > 0 {
				fmt.Fprintf(c.out, "%d more match but cannot be replayed (malformed envelopes, see: sluicectl dlq list --reason malformed_envelope); they would stay in the DLQ\n", n)
			}
			return nil
		}
		fmt.Fprintf(c.out, "replay %s started; follow it with: sluicectl dlq status %s\n", r.GetId(), r.GetId())
		return nil
	}
	// Follow the replay to its end with a progress bar on stderr.
	for r.GetState() == adminv1.Replay_STATE_RUNNING {
		drawProgress(progress, r)
		select {
		case <-c.ctx.Done():
			fmt.Fprintln(progress)
			return fmt.Errorf("stopped following replay %s (it keeps running; cancel it with: sluicectl dlq cancel %s)", r.GetId(), r.GetId())
		case <-time.After(250 * time.Millisecond):
		}
		ctx, cancel := c.call()
		got, err := c.client.GetReplay(ctx, &adminv1.GetReplayRequest{ReplayId: r.GetId()})
		cancel()
		if err != nil {
			return c.explain(err)
		}
		r = got.GetReplay()
	}
	drawProgress(progress, r)
	fmt.Fprintln(progress)
	if c.json {
		err = printJSON(c.out, r)
	} else {
		err = printReplays(c.out, []*adminv1.Replay{r})
	}
	return cmp.Or(err, replayOutcome(r))
}

// replayOutcome is the error a replay that ended short of doing all it
// matched exits with, so that scripts can tell; nil if it did it all, or
// if it is still running.
func replayOutcome(r *adminv1.Replay) error {
	why := ""
	if r.GetError() != "" {
		why = ": " + r.GetError()
	}
	switch r.GetState() {
	case adminv1.Replay_STATE_FAILED:
		return fmt.Errorf("replay %s failed after moving %d of %d matched jobs%s; the others stay in the DLQ", r.GetId(), r.GetMoved(), r.GetMatched(), why)
	case adminv1.Replay_STATE_CANCELLED:
		return fmt.Errorf("replay %s was cancelled after moving %d of %d matched jobs; the others stay in the DLQ", r.GetId(), r.GetMoved(), r.GetMatched())
	}
	// A dry run's failed are jobs it found no replay can move: reported,
	// not an error of the dry run.
	if r.GetFailed() == 0 || r.GetDryRun() {
		return nil
	}
	var msgs []string
	if n := r.GetFailed() - r.GetMalformed(); n > 0 {
		msgs = append(msgs, fmt.Sprintf("could not move %d of %d matched jobs%s; they stay in the DLQ: run it again once the cause is fixed", n, r.GetMatched(), why))
	}
	if n := r.GetMalformed(); n > 0 {
		msgs = append(msgs, fmt.Sprintf("left %d of %d matched jobs in the DLQ because they are malformed and no replay can move them: see them with sluicectl dlq list --reason malformed_envelope", n, r.GetMatched()))
	}
	return fmt.Errorf("replay %s %s", r.GetId(), strings.Join(msgs, "; it "))
}

// drawProgress redraws one line: a bar of jobs handled out of those
// matched so far.
func drawProgress(w io.Writer, r *adminv1.Replay) {
	done := r.GetMoved() + r.GetFailed()
	// The total shown is what matched (or --max while it runs): with
	// nothing matched it read "0/1 moved" (found in review).
	total := r.GetMatched()
	if r.GetMaxJobs() > 0 && r.GetState() == adminv1.Replay_STATE_RUNNING {
		total = max(total, r.GetMaxJobs())
	}
	const width = 30
	filled := 0
	if total > 0 {
		filled = int(min(done*width/total, width))
	} else if r.GetState() != adminv1.Replay_STATE_RUNNING {
		filled = width
	}
	fmt.Fprintf(w, "\r[%s%s] %d/%d moved, %d failed, %d scanned", strings.Repeat("#", filled), strings.Repeat(".", width-filled), r.GetMoved(), total, r.GetFailed(), r.GetScanned())
}

func setupDLQStatus(fs *flag.FlagSet) runFunc {
	return adminCommand(nil, func(c *admin, _ *env, args []string) error {
		if len(args) > 1 {
			return fmt.Errorf("give at most one replay id (got %d)", len(args))
		}
		ctx, cancel := c.call()
		defer cancel()
		if len(args) == 1 {
			resp, err := c.client.GetReplay(ctx, &adminv1.GetReplayRequest{ReplayId: args[0]})
			if err != nil {
				return c.explain(err)
			}
			if c.json {
				return printJSON(c.out, resp.GetReplay())
			}
			return printReplays(c.out, []*adminv1.Replay{resp.GetReplay()})
		}
		resp, err := c.client.ListReplays(ctx, &adminv1.ListReplaysRequest{})
		if err != nil {
			return c.explain(err)
		}
		if c.json {
			return printJSON(c.out, resp)
		}
		if len(resp.GetReplays()) == 0 {
			fmt.Fprintln(c.out, "(no replays on this drainer; a whole-DLQ redrive is followed with: sluicectl dlq redrive --lane L --status)")
			return nil
		}
		if err := printReplays(c.out, resp.GetReplays()); err != nil {
			return err
		}
		if resp.GetTruncated() {
			fmt.Fprintln(c.out, "(older replays left out to keep the answer small; sluicectl dlq status <id> shows any one of them)")
		}
		return nil
	})(fs)
}

func setupDLQCancel(fs *flag.FlagSet) runFunc {
	return adminCommand(nil, func(c *admin, _ *env, args []string) error {
		if err := wantArgs(args, 1, "give the replay id to cancel (sluicectl dlq status lists them)"); err != nil {
			return err
		}
		ctx, cancel := c.call()
		defer cancel()
		resp, err := c.client.CancelReplay(ctx, &adminv1.CancelReplayRequest{ReplayId: args[0]})
		if err != nil {
			return c.explain(err)
		}
		if c.json {
			return printJSON(c.out, resp.GetReplay())
		}
		return printReplays(c.out, []*adminv1.Replay{resp.GetReplay()})
	})(fs)
}

func setupDLQRedrive(fs *flag.FlagSet) runFunc {
	var lane, cancelTask string
	var rate int
	var showStatus bool
	return adminCommand(func(fs *flag.FlagSet) {
		fs.StringVar(&lane, "lane", "", "lane whose whole DLQ to redrive, or whose redrives --status lists (required but with --cancel)")
		fs.IntVar(&rate, "rate", 0, "messages per second, 1-500 (default: as fast as SQS allows)")
		fs.BoolVar(&showStatus, "status", false, "list the lane's redrive tasks, newest first, with their progress, instead of starting one")
		fs.StringVar(&cancelTask, "cancel", "", "stop the running redrive `task` (the handle printed at its start, or by --status); messages moved stay moved")
	}, func(c *admin, _ *env, args []string) error {
		if err := wantArgs(args, 0, "dlq redrive takes flags only: --lane L [--rate N], --lane L --status, or --cancel TASK"); err != nil {
			return err
		}
		switch {
		case showStatus && cancelTask != "":
			return errors.New("give --status or --cancel, not both")
		case (showStatus || cancelTask != "") && rate != 0:
			return errors.New("--rate is for starting a redrive; it goes with neither --status nor --cancel")
		case cancelTask != "":
			return cancelRedrive(c, lane, cancelTask)
		case lane == "" && showStatus:
			return errors.New("give --lane: the lane whose redrives to list")
		case lane == "":
			return errors.New("give --lane: the lane whose whole DLQ to redrive")
		case showStatus:
			return redriveStatus(c, lane)
		}
		if rate < 0 || rate > 500 {
			return fmt.Errorf("--rate %d: give 1 to 500 messages per second, or 0 for as fast as SQS allows", rate)
		}
		ctx, cancel := c.call()
		defer cancel()
		resp, err := c.client.RedriveDLQ(ctx, &adminv1.RedriveDLQRequest{Lane: lane, MaxPerSecond: int32(rate)})
		if err != nil {
			return c.explain(err)
		}
		if c.json {
			return printJSON(c.out, resp)
		}
		fmt.Fprintf(c.out, "redrive of %s started: task %s\n", resp.GetDlq(), resp.GetTask())
		fmt.Fprintf(c.out, "follow it with: sluicectl dlq redrive --lane %s --status\n", lane)
		fmt.Fprintf(c.out, "stop it with:   sluicectl dlq redrive --cancel %s\n", resp.GetTask())
		return nil
	})(fs)
}

func redriveStatus(c *admin, lane string) error {
	ctx, cancel := c.call()
	defer cancel()
	resp, err := c.client.ListRedrives(ctx, &adminv1.ListRedrivesRequest{Lane: lane})
	if err != nil {
		return c.explain(err)
	}
	switch {
	case c.json:
		err = printJSON(c.out, resp)
	case len(resp.GetTasks()) == 0:
		fmt.Fprintf(c.out, "(no redrives of %s on record; SQS keeps those of the last 14 days)\n", resp.GetDlq())
	default:
		err = printRedrives(c.out, resp.GetTasks())
	}
	return errors.Join(err, newestRedriveFailed(resp, lane))
}

// newestRedriveFailed is an error if the newest redrive of the answer's
// DLQ failed, so that a script that follows one with --status sees it in
// the exit status (it exited 0, found in a walkthrough). Older failures
// are history; a later redrive may have moved what they left.
func newestRedriveFailed(resp *adminv1.ListRedrivesResponse, lane string) error {
	ts := resp.GetTasks()
	if len(ts) == 0 || ts[0].GetStatus() != adminv1.RedriveTask_STATUS_FAILED {
		return nil
	}
	return fmt.Errorf("the newest redrive of %s failed after moving %d of %d messages: %s; what it did not move is still in the DLQ (start another with: sluicectl dlq redrive --lane %s)",
		resp.GetDlq(), ts[0].GetMoved(), ts[0].GetToMove(), cmp.Or(ts[0].GetFailureReason(), "no reason given"), lane)
}

func cancelRedrive(c *admin, lane, task string) error {
	ctx, cancel := c.call()
	defer cancel()
	resp, err := c.client.CancelRedrive(ctx, &adminv1.CancelRedriveRequest{Task: task})
	if err != nil {
		return c.explain(err)
	}
	if c.json {
		return printJSON(c.out, resp)
	}
	fmt.Fprintf(c.out, "redrive task %s cancelled after moving %d messages; those stay moved, the rest stay in the DLQ\n", resp.GetTask(), resp.GetMoved())
	fmt.Fprintf(c.out, "SQS stops it shortly (CANCELLING, then CANCELLED): sluicectl dlq redrive --lane %s --status\n", cmp.Or(lane, "L"))
	return nil
}

// printRedrives prints redrive tasks, the handle last: it is a few hundred
// characters, and only a running task has one.
func printRedrives(w io.Writer, ts []*adminv1.RedriveTask) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tMOVED\tTO MOVE\tRATE\tSTARTED\tFAILURE\tTASK")
	for _, r := range ts {
		rate, started := "max", "-"
		if n := r.GetMaxPerSecond(); n > 0 {
			rate = fmt.Sprintf("%d/s", n)
		}
		if r.GetStartedAt() != nil {
			started = r.GetStartedAt().AsTime().UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", adminview.RedriveStatus(r), r.GetMoved(), r.GetToMove(), rate, started,
			cmp.Or(r.GetFailureReason(), "-"), cmp.Or(r.GetTask(), "-"))
	}
	return tw.Flush()
}

func printReplays(w io.Writer, rs []*adminv1.Replay) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLAY\tSTATE\tDRY RUN\tSCANNED\tMATCHED\tMOVED\tSKIPPED\tFAILED\tSTARTED")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\t%s\n", r.GetId(), adminview.ReplayState(r), r.GetDryRun(), r.GetScanned(), r.GetMatched(), r.GetMoved(), r.GetSkipped(), r.GetFailed(),
			r.GetStartedAt().AsTime().UTC().Format(time.RFC3339))
		if e := r.GetError(); e != "" {
			fmt.Fprintf(tw, "\terror: %s\n", e)
		}
	}
	return tw.Flush()
}
