package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
	"github.com/sluice-dev/sluice/internal/cliconn"
	"github.com/sluice-dev/sluice/internal/tlsflags"
)

const cliUsage = `usage:
  drainer [run] [flags]                 run the drainers and the admin API
  drainer stats [flags]                 queue depths, in flight, delayed, oldest age
  drainer limits [flags] tenant         a tenant's effective limits and the config version
  drainer top [flags]                   live fairness: utilization, Jain's index, top tenants
                                        by share of worker time (--once, --interval, --top)
  drainer dlq list [flags]              list dead-lettered jobs
  drainer dlq replay [flags]            replay dead-lettered jobs (--dry-run to preview)
  drainer dlq status [flags] [id]       a replay's progress, or all replays
  drainer dlq cancel [flags] id         stop a running replay
  drainer dlq redrive --lane L [--rate N]  move a lane's whole DLQ back with SQS's native
                                        move task (for crash-loop redrives; keeps attempt counts)

Operator commands take --admin-addr (SLUICE_ADMIN_ADDR), --admin-key
(SLUICE_ADMIN_KEY, or the file <data-dir>/admin-key), --json, and for a
TLS admin API --tls-ca, --tls-cert/--tls-key (mutual TLS) and
--tls-server-name.
`

// cli holds what every operator command needs.
type cli struct {
	out    io.Writer
	json   bool
	admin  adminv1.AdminServiceClient
	ctx    context.Context
	cancel context.CancelFunc
}

// filterFlags are the DLQ filter flags shared by list and replay.
type filterFlags struct {
	lanes, tenants, after, before, reason string
	allTenants                            bool
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.lanes, "lane", "", "comma-separated lanes (default: all)")
	fs.StringVar(&f.tenants, "tenant", "", "comma-separated tenants")
	fs.BoolVar(&f.allTenants, "all-tenants", false, "match every tenant (replay requires --tenant or this)")
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

// runCLI runs an operator command; args start after the command word(s).
func runCLI(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("drainer "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("admin-addr", envOr("SLUICE_ADMIN_ADDR", "127.0.0.1:7071"), "admin API address")
	key := fs.String("admin-key", os.Getenv("SLUICE_ADMIN_KEY"), "admin API key")
	dataDir := fs.String("data-dir", "data", "where to find admin-key when --admin-key is not given")
	jsonOut := fs.Bool("json", false, "print JSON instead of tables")
	timeout := fs.Duration("timeout", 30*time.Second, "call timeout")
	var tlsc tlsflags.Client
	tlsc.Register(fs, "", "the admin API")
	var ff filterFlags
	var pageSize, preview int
	var pageToken string
	var dryRun, noWait bool
	var maxJobs int64
	var rps float64
	var lane string
	var perSecond int
	var top topFlags
	switch cmd {
	case "top":
		top.register(fs)
	case "dlq redrive":
		fs.StringVar(&lane, "lane", "", "lane whose DLQ to redrive (required)")
		fs.IntVar(&perSecond, "rate", 0, "messages per second, 1-500 (default: as fast as SQS allows)")
	case "dlq list":
		ff.register(fs)
		fs.IntVar(&pageSize, "limit", 50, "jobs per page (1-500)")
		fs.StringVar(&pageToken, "page", "", "page token from a previous listing")
		fs.IntVar(&preview, "preview", 64, "payload bytes to show")
	case "dlq replay":
		ff.register(fs)
		fs.BoolVar(&dryRun, "dry-run", false, "report what would move without moving anything")
		fs.Int64Var(&maxJobs, "max", 0, "stop after this many jobs (0: all)")
		fs.Float64Var(&rps, "rate", 0, "jobs per second (default 100)")
		fs.BoolVar(&noWait, "no-wait", false, "start the replay and return its id without following it")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *key == "" {
		if b, err := os.ReadFile(*dataDir + "/admin-key"); err == nil {
			*key = strings.TrimSpace(string(b))
		}
	}
	if *key == "" {
		return errors.New("no admin key: pass --admin-key, set SLUICE_ADMIN_KEY, or run where <data-dir>/admin-key exists")
	}
	conn, err := cliconn.Dial(*addr, "--admin-addr", *key, tlsc)
	if err != nil {
		return err
	}
	defer conn.Close()
	c := &cli{ctx: ctx, out: stdout, json: *jsonOut, admin: adminv1.NewAdminServiceClient(conn)}
	call := func() (context.Context, context.CancelFunc) { return context.WithTimeout(c.ctx, *timeout) }

	switch cmd {
	case "stats":
		return c.stats(call, *addr)
	case "top":
		return c.top(call, *addr, top)
	case "limits":
		if fs.NArg() != 1 {
			return errors.New("give the tenant whose limits to show, e.g. drainer limits acme")
		}
		return c.limits(call, *addr, fs.Arg(0))
	case "dlq list":
		f, err := ff.build(time.Now())
		if err != nil {
			return err
		}
		return c.list(call, *addr, &adminv1.ListDLQRequest{Filter: f, PageSize: int32(pageSize), PageToken: pageToken, PreviewBytes: int32(preview)})
	case "dlq replay":
		f, err := ff.build(time.Now())
		if err != nil {
			return err
		}
		return c.replay(call, *addr, &adminv1.ReplayDLQRequest{Filter: f, DryRun: dryRun, MaxJobs: maxJobs, RatePerSecond: rps}, noWait, stderr)
	case "dlq status":
		if fs.NArg() > 1 {
			return errors.New("give at most one replay id")
		}
		return c.status(call, *addr, fs.Arg(0))
	case "dlq redrive":
		if lane == "" {
			return errors.New("give --lane: the lane whose whole DLQ to redrive")
		}
		ctx, cancel := call()
		defer cancel()
		resp, err := c.admin.RedriveDLQ(ctx, &adminv1.RedriveDLQRequest{Lane: lane, MaxPerSecond: int32(perSecond)})
		if err != nil {
			return explain(err, *addr)
		}
		if c.json {
			return c.printJSON(resp)
		}
		fmt.Fprintf(c.out, "redrive of %s started: task %s\n", resp.GetDlq(), resp.GetTask())
		return nil
	case "dlq cancel":
		if fs.NArg() != 1 {
			return errors.New("give the replay id to cancel (see drainer dlq status)")
		}
		ctx, cancel := call()
		defer cancel()
		resp, err := c.admin.CancelReplay(ctx, &adminv1.CancelReplayRequest{ReplayId: fs.Arg(0)})
		if err != nil {
			return explain(err, *addr)
		}
		return c.printReplays([]*adminv1.Replay{resp.GetReplay()})
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// explain turns an RPC error into a message that says what to fix.
func explain(err error, addr string) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		return fmt.Errorf("cannot reach the admin API at %s (is the gateway or drainer running, and is --admin-addr right?): %s", addr, st.Message())
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("admin API refused the credential: %s (use the admin key, not a tenant key)", st.Message())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", st.Code(), st.Message())
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fmt.Fprintf(&b, "\n  %s: %s", v.GetField(), v.GetDescription())
			}
		}
	}
	return errors.New(b.String())
}

func (c *cli) printJSON(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: false}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.out, string(b))
	return err
}

func (c *cli) stats(call func() (context.Context, context.CancelFunc), addr string) error {
	ctx, cancel := call()
	defer cancel()
	resp, err := c.admin.GetQueueStats(ctx, &adminv1.GetQueueStatsRequest{})
	if err != nil {
		return explain(err, addr)
	}
	if c.json {
		return c.printJSON(resp)
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tLANE\tKIND\tVISIBLE\tIN FLIGHT\tDELAYED\tOLDEST\t")
	for _, q := range resp.GetQueues() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t\n", q.GetQueue(), q.GetLane(), q.GetKind(), q.GetVisible(), q.GetInFlight(), q.GetDelayed(), q.GetOldestAge().AsDuration().Round(time.Second))
	}
	return tw.Flush()
}

func (c *cli) limits(call func() (context.Context, context.CancelFunc), addr, tenantID string) error {
	ctx, cancel := call()
	defer cancel()
	resp, err := c.admin.GetTenantLimits(ctx, &adminv1.GetTenantLimitsRequest{Tenant: tenantID})
	if err != nil {
		return explain(err, addr)
	}
	if c.json {
		return c.printJSON(resp)
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
	fmt.Fprintf(tw, "share\tweight %s, guaranteed %.0f%% of the slots\n", weightText(l.GetWeight()), l.GetMinShare()*100)
	fmt.Fprintf(tw, "ceilings\t%s\n", ceilingsText(l))
	fmt.Fprintf(tw, "payload\tat most %d bytes\n", l.GetMaxPayloadBytes())
	fmt.Fprintf(tw, "config\t%s, loaded %s\n", source, v.GetLoadedAt().AsTime().UTC().Format(time.RFC3339))
	return tw.Flush()
}

func (c *cli) list(call func() (context.Context, context.CancelFunc), addr string, req *adminv1.ListDLQRequest) error {
	ctx, cancel := call()
	defer cancel()
	resp, err := c.admin.ListDLQ(ctx, req)
	if err != nil {
		return explain(err, addr)
	}
	if c.json {
		return c.printJSON(resp)
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tTENANT\tLANE\tREASON\tATTEMPTS\tACCEPTED\tBYTES\tPAYLOAD")
	for _, j := range resp.GetJobs() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%q\n", j.GetJobId(), j.GetTenant(), j.GetLane(), truncate(j.GetReason(), 48), j.GetAttempts(),
			j.GetEnqueuedAt().AsTime().UTC().Format(time.RFC3339), j.GetPayloadBytes(), j.GetPayloadPreview())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(resp.GetJobs()) == 0 {
		fmt.Fprintln(c.out, "(no dead-lettered jobs match)")
	}
	if t := resp.GetNextPageToken(); t != "" {
		fmt.Fprintf(c.out, "more: --page %s\n", t)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func (c *cli) replay(call func() (context.Context, context.CancelFunc), addr string, req *adminv1.ReplayDLQRequest, noWait bool, progress io.Writer) error {
	ctx, cancel := call()
	defer cancel()
	resp, err := c.admin.ReplayDLQ(ctx, req)
	if err != nil {
		return explain(err, addr)
	}
	r := resp.GetReplay()
	if req.GetDryRun() || noWait {
		if c.json {
			return c.printJSON(r)
		}
		if req.GetDryRun() {
			fmt.Fprintf(c.out, "dry run: %d of %d dead-lettered jobs would be replayed\n", r.GetMatched(), r.GetScanned())
			return nil
		}
		fmt.Fprintf(c.out, "replay %s started; follow it with: drainer dlq status %s\n", r.GetId(), r.GetId())
		return nil
	}
	// Follow the replay to its end with a progress bar on stderr.
	for r.GetState() == adminv1.Replay_STATE_RUNNING {
		drawProgress(progress, r)
		select {
		case <-c.ctx.Done():
			fmt.Fprintln(progress)
			return fmt.Errorf("stopped following replay %s (it keeps running; cancel with: drainer dlq cancel %s)", r.GetId(), r.GetId())
		case <-time.After(250 * time.Millisecond):
		}
		ctx, cancel := call()
		got, err := c.admin.GetReplay(ctx, &adminv1.GetReplayRequest{ReplayId: r.GetId()})
		cancel()
		if err != nil {
			return explain(err, addr)
		}
		r = got.GetReplay()
	}
	drawProgress(progress, r)
	fmt.Fprintln(progress)
	if c.json {
		return c.printJSON(r)
	}
	return c.printReplays([]*adminv1.Replay{r})
}

// drawProgress redraws one line: a bar of jobs handled out of those
// matched so far.
func drawProgress(w io.Writer, r *adminv1.Replay) {
	done := r.GetMoved() + r.GetFailed()
	total := max(r.GetMatched(), 1)
	if r.GetMaxJobs() > 0 {
		total = max(total, r.GetMaxJobs())
	}
	const width = 30
	filled := int(min(done*width/total, width))
	fmt.Fprintf(w, "\r[%s%s] %d/%d moved, %d failed, %d scanned", strings.Repeat("#", filled), strings.Repeat(".", width-filled), r.GetMoved(), total, r.GetFailed(), r.GetScanned())
}

func (c *cli) status(call func() (context.Context, context.CancelFunc), addr, id string) error {
	ctx, cancel := call()
	defer cancel()
	if id != "" {
		resp, err := c.admin.GetReplay(ctx, &adminv1.GetReplayRequest{ReplayId: id})
		if err != nil {
			return explain(err, addr)
		}
		if c.json {
			return c.printJSON(resp.GetReplay())
		}
		return c.printReplays([]*adminv1.Replay{resp.GetReplay()})
	}
	resp, err := c.admin.ListReplays(ctx, &adminv1.ListReplaysRequest{})
	if err != nil {
		return explain(err, addr)
	}
	if c.json {
		return c.printJSON(resp)
	}
	if len(resp.GetReplays()) == 0 {
		fmt.Fprintln(c.out, "(no replays on this drainer)")
		return nil
	}
	return c.printReplays(resp.GetReplays())
}

func (c *cli) printReplays(rs []*adminv1.Replay) error {
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLAY\tSTATE\tDRY RUN\tSCANNED\tMATCHED\tMOVED\tSKIPPED\tFAILED\tSTARTED")
	for _, r := range rs {
		state := strings.ToLower(strings.TrimPrefix(r.GetState().String(), "STATE_"))
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\t%s\n", r.GetId(), state, r.GetDryRun(), r.GetScanned(), r.GetMatched(), r.GetMoved(), r.GetSkipped(), r.GetFailed(),
			r.GetStartedAt().AsTime().UTC().Format(time.RFC3339))
		if e := r.GetError(); e != "" {
			fmt.Fprintf(tw, "\terror: %s\n", e)
		}
	}
	return tw.Flush()
}
