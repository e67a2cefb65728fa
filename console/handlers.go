package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/adminview"
)

// apiTimeout bounds each admin call a page makes.
const apiTimeout = 30 * time.Second

func (c *Console) routes() {
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFiles)))
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.action(c.logout))
	m.HandleFunc("GET /{$}", c.page(c.overview))
	m.HandleFunc("GET /tenants", c.page(c.tenants))
	m.HandleFunc("GET /dlq", c.page(c.dlq))
	m.HandleFunc("GET /dlq/job", c.page(c.job))
	m.HandleFunc("POST /replays", c.action(c.replay))
	m.HandleFunc("GET /replays", c.page(c.replays))
	m.HandleFunc("GET /replays/{id}", c.page(c.replayPage))
	m.HandleFunc("POST /replays/{id}/cancel", c.action(c.cancel))
	c.mux = m
}

// view is what every page template gets.
type view struct {
	Title    string
	Nav      string // overview, tenants, dlq, replays
	Role     string
	ReadOnly bool
	CSRF     string
	Refresh  int // seconds; 0: none
	Error    string
	Data     any
}

type pageFunc func(ctx context.Context, s *session, r *http.Request, v *view) (tmpl string)

// page wraps a GET handler: it needs a session, and renders the template
// the handler names with the view it filled.
func (c *Console) page(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := c.sessionOf(r)
		if s == nil {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		v := &view{Role: s.role.String(), ReadOnly: s.role == roleReadOnly, CSRF: s.csrf}
		ctx, cancel := context.WithTimeout(c.apiContext(r.Context()), apiTimeout)
		defer cancel()
		tmpl := fn(ctx, s, r, v)
		code := http.StatusOK
		if v.Error != "" {
			code = http.StatusBadRequest
		}
		c.render(w, code, tmpl, v)
	}
}

// action wraps a POST handler: it needs a session and the session's CSRF
// token in the form.
func (c *Console) action(fn func(ctx context.Context, s *session, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		s := c.sessionOf(r)
		if s == nil {
			c.log.WarnContext(r.Context(), "console: action refused: not signed in", slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
			http.Error(w, "not signed in: sign in again at /login", http.StatusUnauthorized)
			return
		}
		if !sameToken(r.PostFormValue("csrf"), s.csrf) {
			c.log.WarnContext(r.Context(), "console: action refused: missing or wrong CSRF token", slog.String("path", r.URL.Path), slog.String("who", s.role.String()), slog.String("remote", r.RemoteAddr))
			http.Error(w, "refused: the form's CSRF token is missing or wrong; reload the page and try again", http.StatusForbidden)
			return
		}
		ctx, cancel := context.WithTimeout(c.apiContext(r.Context()), apiTimeout)
		defer cancel()
		fn(ctx, s, w, r)
	}
}

func (c *Console) render(w http.ResponseWriter, code int, name string, v *view) {
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, v); err != nil {
		c.log.Error("console: render", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "the page could not be rendered (see the server log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// apiError renders an admin API error for a person: the message and any
// field violations.
func apiError(err error) string {
	st := status.Convert(err)
	var b strings.Builder
	switch st.Code() {
	case codes.Unavailable:
		b.WriteString("the admin API is unavailable: ")
	case codes.Unauthenticated, codes.PermissionDenied:
		b.WriteString("the admin API refused the console's credential: ")
	}
	b.WriteString(st.Message())
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for i, fv := range br.GetFieldViolations() {
				if i == 0 { // the message says it already
					continue
				}
				fmt.Fprintf(&b, "; %s: %s", fv.GetField(), fv.GetDescription())
			}
		}
	}
	return b.String()
}

// --- sign-in ---

const loginCookie = "sluice_console_login"

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.showLogin(w, r, http.StatusOK, "")
}

func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, code int, msg string) {
	token := randomToken()
	c.setCookie(w, loginCookie, token, 600)
	c.render(w, code, "login", &view{Title: "Sign in", CSRF: token, Error: msg, Data: map[string]any{
		"Next": safeNext(r.FormValue("next")), "ReadOnlyKey": c.cfg.ReadOnlyKey != "",
	}})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	ck, err := r.Cookie(loginCookie)
	if err != nil || !sameToken(r.PostFormValue("csrf"), ck.Value) {
		c.log.WarnContext(r.Context(), "console: sign-in refused: missing or wrong CSRF token", slog.String("remote", r.RemoteAddr))
		c.showLogin(w, r, http.StatusForbidden, "The sign-in form expired or was not sent from this console: try again.")
		return
	}
	pace := c.signInPace(r.RemoteAddr)
	if pace.Tokens() < 1 {
		c.log.WarnContext(r.Context(), "console: sign-in refused unread: too many refused sign-ins from this address of late", slog.String("remote", r.RemoteAddr))
		w.Header().Set("Retry-After", "5")
		c.showLogin(w, r, http.StatusTooManyRequests, "Too many sign-ins were refused just now: wait a few seconds and try again.")
		return
	}
	role, ok := c.keyRole(strings.TrimSpace(r.PostFormValue("key")))
	if !ok {
		pace.Allow() // spends one of the address's tokens
		// The read-only key is named only when there is one: it was named
		// to a console that has none (found in a walkthrough).
		msg := "Not the admin key. Sign in with the admin key (the file admin-key in the data directory, or --admin-key); tenant keys are refused."
		if c.cfg.ReadOnlyKey != "" {
			msg = "Not the admin key. Sign in with the admin key (the file admin-key in the data directory, or --admin-key) or the read-only key; tenant keys are refused."
		}
		c.log.WarnContext(r.Context(), "console: sign-in refused: not the admin or read-only key", slog.String("remote", r.RemoteAddr))
		c.showLogin(w, r, http.StatusUnauthorized, msg)
		return
	}
	s := c.newSession(role)
	c.setCookie(w, loginCookie, "", -1)
	c.setCookie(w, sessionCookie, s.id, int(c.cfg.SessionTTL/time.Second))
	c.log.InfoContext(r.Context(), "console: signed in", slog.String("who", role.String()), slog.String("remote", r.RemoteAddr))
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (c *Console) logout(ctx context.Context, s *session, w http.ResponseWriter, r *http.Request) {
	c.endSession(s)
	c.setCookie(w, sessionCookie, "", -1)
	c.log.InfoContext(ctx, "console: signed out", slog.String("who", s.role.String()), slog.String("remote", r.RemoteAddr))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect on this console. Browsers drop
// tabs and newlines from a URL and read a backslash as a slash, so a
// next holding any control character or backslash is refused: "/\t/evil"
// is //evil to them (found in review).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	return next
}

// --- pages ---

func (c *Console) overview(ctx context.Context, _ *session, _ *http.Request, v *view) string {
	v.Title, v.Nav, v.Refresh = "Overview", "overview", max(10, int(c.cfg.SampleInterval/time.Second))
	resp, err := c.cfg.Admin.GetQueueStats(ctx, &adminv1.GetQueueStatsRequest{})
	if err != nil {
		v.Error = apiError(err)
		return "overview"
	}
	fair := c.fairness(ctx, 1)
	lanes := withFairness(lanesOf(resp.GetQueues()), fair)
	samples := c.hist.snapshot()
	now := time.Now()
	// The charts span the last History, or the time since sampling began.
	span := c.cfg.History
	if len(samples) > 1 {
		span = min(span, max(now.Sub(samples[0].at), 2*c.cfg.SampleInterval))
	}
	var out []laneView
	for _, l := range lanes {
		lv := laneView{laneStat: l, Chart: chart(counts, samples, l.Lane, span, now), Ratio: chart(ratios, samples, l.Lane, span, now)}
		for _, lf := range fair.GetLanes() {
			if lf.GetLane() == l.Lane && len(lf.GetTenants()) > 0 {
				lv.Top = lf.GetTenants()[0]
			}
		}
		out = append(out, lv)
	}
	v.Data = map[string]any{
		"Lanes": out, "Span": shortDuration(span), "Every": c.cfg.SampleInterval.String(), "Samples": len(samples),
		"Drains": fair != nil, "Slots": fair.GetSlots(), "Busy": fair.GetBusy(),
	}
	return "overview"
}

// laneView is a lane on the overview.
type laneView struct {
	laneStat
	Top          *adminv1.TenantFairness // the largest share of worker time
	Chart, Ratio template.HTML
}

// topTenants is how many tenants per lane the Tenants page shows.
const topTenants = 20

func (c *Console) tenants(ctx context.Context, _ *session, r *http.Request, v *view) string {
	v.Title, v.Nav = "Tenants", "tenants"
	data := map[string]any{}
	v.Data = data
	// The tenants with dead letters, from the first pages of the DLQs.
	counts := map[string]int{}
	// A listing that fails (a replay holds the DLQ, or it is past the
	// scan bound) leaves a note there, not the page without its shares
	// and limits (found in review).
	resp, err := c.cfg.Admin.ListDLQ(ctx, &adminv1.ListDLQRequest{PageSize: 500, PreviewBytes: 1})
	if err != nil {
		data["DeadNote"] = apiError(err)
	}
	// A message that is not an envelope has no tenant: it is counted
	// apart, not as a tenant with no name.
	malformed := 0
	for _, j := range resp.GetJobs() {
		if j.GetTenant() == "" {
			malformed++
			continue
		}
		counts[j.GetTenant()]++
	}
	data["Malformed"] = malformed
	type tc struct {
		Tenant string
		Count  int
	}
	var dead []tc
	for t, n := range counts {
		dead = append(dead, tc{t, n})
	}
	slices.SortFunc(dead, func(a, b tc) int { return cmpDesc(a.Count, b.Count, a.Tenant, b.Tenant) })
	// A page of bulky jobs ends before 500: say how many were counted.
	data["Dead"], data["DeadMore"], data["Counted"] = dead, resp.GetNextPageToken() != "", len(resp.GetJobs())
	fair := c.fairness(ctx, topTenants)
	data["Drains"], data["Fair"], data["Top"] = fair != nil, fair.GetLanes(), topTenants
	id := strings.TrimSpace(r.FormValue("tenant"))
	data["Tenant"] = id
	if id == "" {
		return "tenants"
	}
	lim, err := c.cfg.Admin.GetTenantLimits(ctx, &adminv1.GetTenantLimitsRequest{Tenant: id})
	if err != nil {
		v.Error = apiError(err)
		return "tenants"
	}
	data["Limits"] = lim
	return "tenants"
}

func cmpDesc(a, b int, ta, tb string) int {
	if a != b {
		return b - a
	}
	return strings.Compare(ta, tb)
}

// filterForm is the DLQ filter as the forms send it. After, the time
// Since stood for in a dry run (RFC 3339), is what the dry run's Replay
// button sends: Since read again at the press moved the range the dry run
// had counted.
type filterForm struct {
	Lane, Tenant, Reason, Since, After string
	AllTenants                         bool
}

func filterFormOf(r *http.Request) filterForm {
	return filterForm{
		Lane: strings.TrimSpace(r.FormValue("lane")), Tenant: strings.TrimSpace(r.FormValue("tenant")),
		Reason: strings.TrimSpace(r.FormValue("reason")), Since: strings.TrimSpace(r.FormValue("since")),
		After: strings.TrimSpace(r.FormValue("after")), AllTenants: r.FormValue("all_tenants") == "1",
	}
}

func (f filterForm) build(now time.Time) (*adminv1.DLQFilter, error) {
	out := &adminv1.DLQFilter{ReasonPrefix: f.Reason, AllTenants: f.AllTenants}
	if f.Lane != "" {
		out.Lanes = []string{f.Lane}
	}
	for t := range strings.SplitSeq(f.Tenant, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out.Tenants = append(out.Tenants, t)
		}
	}
	switch {
	case f.After != "":
		at, err := time.Parse(time.RFC3339Nano, f.After)
		if err != nil {
			return nil, fmt.Errorf("after %q: not a time (RFC 3339); run the dry run again", f.After)
		}
		out.EnqueuedAfter = timestamppb.New(at)
	case f.Since != "":
		d, err := time.ParseDuration(f.Since)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("since %q: give a duration such as 30m or 2h", f.Since)
		}
		out.EnqueuedAfter = timestamppb.New(now.Add(-d))
	}
	return out, nil
}

// query is the filter as URL parameters, for links.
func (f filterForm) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"lane": f.Lane, "tenant": f.Tenant, "reason": f.Reason, "since": f.Since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.AllTenants {
		q.Set("all_tenants", "1")
	}
	return q
}

// previewBytes is how much payload the DLQ list shows.
const previewBytes = 160

func (c *Console) lanes(ctx context.Context) []string {
	resp, err := c.cfg.Admin.GetQueueStats(ctx, &adminv1.GetQueueStatsRequest{})
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range lanesOf(resp.GetQueues()) {
		out = append(out, l.Lane)
	}
	return out
}

func (c *Console) dlq(ctx context.Context, _ *session, r *http.Request, v *view) string {
	v.Title, v.Nav = "Dead letters", "dlq"
	ff := filterFormOf(r)
	data := map[string]any{"F": ff, "R": replayForm{Tenant: ff.Tenant, AllTenants: ff.AllTenants}, "Lanes": c.lanes(ctx)}
	v.Data = data
	if err := c.listDLQ(ctx, ff, r.FormValue("page"), data); err != nil {
		v.Error = err.Error()
	}
	return "dlq"
}

// listDLQ puts the page of dead letters ff matches in data: Jobs, Next,
// and Listed once the listing was read (the page says "no jobs match"
// only then, not under an error that left it unread).
func (c *Console) listDLQ(ctx context.Context, ff filterForm, page string, data map[string]any) error {
	f, err := ff.build(time.Now())
	if err != nil {
		return err
	}
	resp, err := c.cfg.Admin.ListDLQ(ctx, &adminv1.ListDLQRequest{Filter: f, PageSize: 50, PageToken: page, PreviewBytes: previewBytes})
	if err != nil {
		return errors.New(apiError(err))
	}
	data["Listed"], data["Jobs"] = true, resp.GetJobs()
	if t := resp.GetNextPageToken(); t != "" {
		q := ff.query()
		q.Set("page", t)
		data["Next"] = "/dlq?" + q.Encode()
	}
	return nil
}

// replayForm is the DLQ page's replay form as sent: whose jobs and the
// limits. Its tenants are apart from the filter's: a refused replay shows
// both forms again as the user left them.
type replayForm struct {
	Tenant     string
	AllTenants bool
	Max, Rate  string
}

func (c *Console) job(ctx context.Context, _ *session, r *http.Request, v *view) string {
	v.Title, v.Nav = "Dead letter", "dlq"
	id := r.FormValue("id")
	token := ""
	for {
		resp, err := c.cfg.Admin.ListDLQ(ctx, &adminv1.ListDLQRequest{PageSize: 500, PageToken: token, PreviewBytes: 4096})
		if err != nil {
			v.Error = apiError(err)
			return "job"
		}
		for _, j := range resp.GetJobs() {
			if j.GetJobId() == id {
				v.Data = j
				return "job"
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			v.Error = fmt.Sprintf("job %q is not in a dead-letter queue (replayed already?)", id)
			return "job"
		}
	}
}

// replay runs a dry run, or with confirm=1 starts the replay. A read-only
// session may dry-run only.
func (c *Console) replay(ctx context.Context, s *session, w http.ResponseWriter, r *http.Request) {
	ff := filterFormOf(r)
	dry := r.PostFormValue("confirm") != "1"
	if !dry && s.role != roleAdmin {
		c.log.WarnContext(ctx, "console: replay refused: read-only key", slog.String("who", s.role.String()), slog.String("remote", r.RemoteAddr))
		http.Error(w, "refused: the read-only key cannot replay; sign in with the admin key", http.StatusForbidden)
		return
	}
	v := &view{Title: "Replay", Nav: "dlq", Role: s.role.String(), ReadOnly: s.role == roleReadOnly, CSRF: s.csrf}
	data := map[string]any{"F": ff, "Lanes": c.lanes(ctx)}
	v.Data = data
	// A refused form shows the error over the DLQ page as the filter
	// left it, with its listing, and the replay form as it was sent: it
	// said "No dead-lettered jobs match" over a DLQ of jobs, emptied
	// the limits and put the replay's tenants in the filter (found in a
	// walkthrough).
	refuse := func(code int, msg string) {
		list := filterForm{Lane: ff.Lane, Tenant: ff.Tenant, Reason: ff.Reason, Since: ff.Since}
		if _, ok := r.PostForm["filter_tenant"]; ok {
			list.Tenant = strings.TrimSpace(r.PostFormValue("filter_tenant"))
		}
		data["F"] = list
		data["R"] = replayForm{Tenant: ff.Tenant, AllTenants: ff.AllTenants, Max: r.PostFormValue("max"), Rate: r.PostFormValue("rate")}
		v.Error = msg
		if err := c.listDLQ(ctx, list, "", data); err != nil {
			v.Error += ". The dead letters could not be listed: " + err.Error()
		}
		c.render(w, code, "dlq", v)
	}
	f, err := ff.build(time.Now())
	if err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	// An unreadable number is refused: read as 0 it meant every job, or
	// the default rate (found in review).
	maxJobs, rate, err := replayLimits(r.PostFormValue("max"), r.PostFormValue("rate"))
	if err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	req := &adminv1.ReplayDLQRequest{Filter: f, DryRun: dry, MaxJobs: maxJobs, RatePerSecond: rate}
	resp, err := c.cfg.Admin.ReplayDLQ(ctx, req)
	if err != nil {
		refuse(http.StatusBadRequest, apiError(err))
		return
	}
	rp := resp.GetReplay()
	c.log.InfoContext(ctx, "console: replay", slog.String("who", s.role.String()), slog.Bool("dry_run", dry), slog.String("replay_id", rp.GetId()),
		slog.Any("lanes", f.GetLanes()), slog.Any("tenants", f.GetTenants()), slog.Bool("all_tenants", f.GetAllTenants()),
		slog.String("reason", f.GetReasonPrefix()), slog.Int64("matched", rp.GetMatched()), slog.String("remote", r.RemoteAddr))
	if !dry {
		http.Redirect(w, r, "/replays/"+url.PathEscape(rp.GetId()), http.StatusSeeOther)
		return
	}
	// A dry run that failed or was cancelled counted only part of the DLQ,
	// or none of it: shown as a result, it read "0 of 0 would be
	// replayed" (found in review).
	if rp.GetState() != adminv1.Replay_STATE_DONE {
		msg := fmt.Sprintf("The dry run %s after scanning %d dead-lettered jobs, so it cannot tell what a replay would move", adminview.ReplayState(rp), rp.GetScanned())
		if e := rp.GetError(); e != "" {
			msg += ": " + e
		}
		refuse(http.StatusBadGateway, msg)
		return
	}
	if at := rp.GetFilter().GetEnqueuedAfter(); at != nil {
		ff.After = at.AsTime().Format(time.RFC3339Nano)
		data["F"] = ff
	}
	data["Dry"], data["Max"], data["Rate"] = rp, r.PostFormValue("max"), r.PostFormValue("rate")
	c.render(w, http.StatusOK, "dryrun", v)
}

// replayLimits reads the replay form's "most jobs" and "jobs per second"
// fields; empty means all jobs and the API's default rate.
func replayLimits(maxText, rateText string) (maxJobs int64, rate float64, err error) {
	if maxText = strings.TrimSpace(maxText); maxText != "" {
		maxJobs, err = strconv.ParseInt(maxText, 10, 64)
		if err != nil || maxJobs < 0 {
			return 0, 0, fmt.Errorf("most jobs %q: give a whole number of jobs such as 500 (no commas or units), or leave it empty for every job that matches", maxText)
		}
	}
	if rateText = strings.TrimSpace(rateText); rateText != "" {
		rate, err = strconv.ParseFloat(rateText, 64)
		if err != nil || !(rate > 0) || math.IsInf(rate, 0) {
			return 0, 0, fmt.Errorf("jobs per second %q: give a positive number such as 50 (no units), or leave it empty for the default", rateText)
		}
	}
	return maxJobs, rate, nil
}

func (c *Console) replays(ctx context.Context, _ *session, _ *http.Request, v *view) string {
	v.Title, v.Nav = "Replays", "replays"
	resp, err := c.cfg.Admin.ListReplays(ctx, &adminv1.ListReplaysRequest{})
	if err != nil {
		v.Error = apiError(err)
		return "replays"
	}
	redrives, err := c.redrives(ctx)
	if err != nil {
		v.Error = apiError(err)
	}
	v.Data = map[string]any{"Replays": resp.GetReplays(), "Redrives": redrives}
	for _, r := range resp.GetReplays() {
		if r.GetState() == adminv1.Replay_STATE_RUNNING {
			v.Refresh = 2
		}
	}
	for _, l := range redrives {
		for _, t := range l.GetTasks() {
			if t.GetStatus() == adminv1.RedriveTask_STATUS_RUNNING || t.GetStatus() == adminv1.RedriveTask_STATUS_CANCELLING {
				v.Refresh = 2
			}
		}
	}
	return "replays"
}

// redrives lists each lane's whole-DLQ move tasks (sluicectl dlq redrive)
// that the backend keeps: SQS's. The embedded backend has none, and
// answers FAILED_PRECONDITION for the first lane: nil, no error. The
// console showed replays only, so a redrive under way on SQS could be
// followed only from sluicectl (found in a walkthrough).
func (c *Console) redrives(ctx context.Context) ([]*adminv1.ListRedrivesResponse, error) {
	var out []*adminv1.ListRedrivesResponse
	for _, lane := range c.lanes(ctx) {
		resp, err := c.cfg.Admin.ListRedrives(ctx, &adminv1.ListRedrivesRequest{Lane: lane})
		if status.Code(err) == codes.FailedPrecondition {
			return nil, nil
		}
		if err != nil {
			return out, err
		}
		if len(resp.GetTasks()) > 0 {
			out = append(out, resp)
		}
	}
	return out, nil
}

func (c *Console) replayPage(ctx context.Context, _ *session, r *http.Request, v *view) string {
	v.Title, v.Nav = "Replay", "replays"
	resp, err := c.cfg.Admin.GetReplay(ctx, &adminv1.GetReplayRequest{ReplayId: r.PathValue("id")})
	if err != nil {
		v.Error = apiError(err)
		return "replay"
	}
	v.Data = resp.GetReplay()
	if resp.GetReplay().GetState() == adminv1.Replay_STATE_RUNNING {
		v.Refresh = 1
	}
	return "replay"
}

func (c *Console) cancel(ctx context.Context, s *session, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.role != roleAdmin {
		c.log.WarnContext(ctx, "console: cancel refused: read-only key", slog.String("who", s.role.String()), slog.String("replay_id", id), slog.String("remote", r.RemoteAddr))
		http.Error(w, "refused: the read-only key cannot cancel a replay; sign in with the admin key", http.StatusForbidden)
		return
	}
	if _, err := c.cfg.Admin.CancelReplay(ctx, &adminv1.CancelReplayRequest{ReplayId: id}); err != nil {
		http.Error(w, apiError(err), http.StatusBadRequest)
		return
	}
	c.log.InfoContext(ctx, "console: replay cancelled", slog.String("who", s.role.String()), slog.String("replay_id", id), slog.String("remote", r.RemoteAddr))
	http.Redirect(w, r, "/replays/"+url.PathEscape(id), http.StatusSeeOther)
}

// --- template helpers ---

var funcs = template.FuncMap{
	"age": func(d interface{ AsDuration() time.Duration }) string { return humanDuration(d.AsDuration()) },
	"dur": humanDuration,
	"when": func(ts *timestamppb.Timestamp) string {
		if ts == nil {
			return "—"
		}
		return ts.AsTime().UTC().Format("2006-01-02 15:04:05Z")
	},
	"ago": func(ts *timestamppb.Timestamp) string {
		if ts == nil {
			return ""
		}
		return humanDuration(time.Since(ts.AsTime())) + " ago"
	},
	"state":     adminview.ReplayState,
	"task":      adminview.RedriveStatus,
	"running":   func(r *adminv1.Replay) bool { return r.GetState() == adminv1.Replay_STATE_RUNNING },
	"payload":   payloadText,
	"reason":    func(d *adminv1.DeadLetter) string { return adminview.Printable(adminview.ShortReason(d)) },
	"printable": adminview.Printable,
	"cut":       adminview.Cut,
	"keys":      func(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) },
	"total":     replayTotal,
	"dryRun":    func(r *adminv1.Replay) string { return adminview.DryRunSummary(r, "most jobs") },
	"movable":   func(r *adminv1.Replay) int64 { return r.GetMatched() - r.GetFailed() },
	"percent": func(r *adminv1.Replay) int64 {
		if t := replayTotal(r); t > 0 {
			return min(100, (r.GetMoved()+r.GetFailed())*100/t)
		}
		if r.GetState() == adminv1.Replay_STATE_RUNNING {
			return 0
		}
		return 100
	},
	"filter":    describeFilter,
	"jobURL":    func(id string) string { return "/dlq/job?" + url.Values{"id": {id}}.Encode() },
	"dlqURL":    func(f filterForm) template.URL { return template.URL("/dlq?" + f.query().Encode()) }, //nolint:gosec // encoded query of a fixed path
	"int64":     func(n int) int64 { return int64(n) },
	"mul100":    func(f float64) float64 { return f * 100 },
	"pct":       percentText,
	"jain":      indexText,
	"stateText": func(s string) string { return strings.ReplaceAll(s, "_", " ") },
	"weight":    weightText,
}

// replayTotal is the jobs a replay's progress counts to: what it matched,
// or its max while it runs. It showed "0 of 1" for a replay that matched
// nothing and "4 of 10" for one done with all 4 it matched (found in
// review).
func replayTotal(r *adminv1.Replay) int64 {
	if r.GetState() == adminv1.Replay_STATE_RUNNING {
		return max(r.GetMatched(), r.GetMaxJobs())
	}
	return r.GetMatched()
}

// percentText shows a figure in [0, 1] as a percentage, and indexText as
// a decimal; both "—" when unknown (negative).
func percentText(v float64) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

func indexText(v float64) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

// weightText shows a weight without needless decimals; 0 is the lane's.
func weightText(w float64) string {
	if w == 0 {
		return "the lane's"
	}
	return strconv.FormatFloat(w, 'f', -1, 64)
}

func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
}

// payloadText shows a dead letter's payload preview: as it is when it is
// printable text (newlines and tabs allowed), else Go-quoted as sluicectl
// dlq list prints it, so that control characters and bytes that are not
// UTF-8 show as escapes ("poison \x01\x02 binary\n"), never raw in the
// page (found in a walkthrough). A preview that ends inside a character
// the payload goes on with is cut before it. The template escapes the
// result for HTML.
func payloadText(d *adminv1.DeadLetter) string {
	b := d.GetPayloadPreview()
	if int64(len(b)) < d.GetPayloadBytes() {
		b = trimPartialRune(b)
	}
	if utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool { return !strconv.IsPrint(r) && r != '\n' && r != '\t' }) {
		return string(b)
	}
	return strconv.Quote(string(b))
}

// trimPartialRune drops the start of a UTF-8 character that b ends in.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

func describeFilter(f *adminv1.DLQFilter) string {
	var parts []string
	if l := f.GetLanes(); len(l) > 0 {
		parts = append(parts, "lanes "+strings.Join(l, ", "))
	}
	switch {
	case len(f.GetTenants()) > 0:
		parts = append(parts, "tenants "+strings.Join(f.GetTenants(), ", "))
	case f.GetAllTenants():
		parts = append(parts, "all tenants")
	}
	if r := f.GetReasonPrefix(); r != "" {
		parts = append(parts, "reason "+r+"…")
	}
	// The whole range, with dates: it showed only a time of day, and no
	// end (found in review).
	const at = "2006-01-02 15:04Z"
	a, b := f.GetEnqueuedAfter(), f.GetEnqueuedBefore()
	switch {
	case a != nil && b != nil:
		parts = append(parts, "accepted from "+a.AsTime().UTC().Format(at)+" and before "+b.AsTime().UTC().Format(at))
	case a != nil:
		parts = append(parts, "accepted since "+a.AsTime().UTC().Format(at))
	case b != nil:
		parts = append(parts, "accepted before "+b.AsTime().UTC().Format(at))
	}
	if len(parts) == 0 {
		return "everything"
	}
	return strings.Join(parts, "; ")
}
