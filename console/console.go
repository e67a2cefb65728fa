// Package console is sluice's web console: server-rendered pages over the
// admin API for whoever runs sluice. Overview (each lane's depth, in
// flight, delayed, oldest age, dead letters, utilization and fairness
// index, with charts of the last hour sampled in process), Tenants (the
// top tenants by share of worker time with their state, a tenant's
// effective limits and the config version; the tenants with dead
// letters), DLQ (filters, payload
// previews, replay with a dry run first) and Replays (progress, cancel).
//
// Every read and action is a call of the admin API (adminv1) through a
// gRPC client, with the admin credential, so the console shows nothing
// and does nothing the API would not. Sign-in takes the admin key, or an
// optional read-only key that can look and dry-run but not replay or
// cancel; tenant keys are refused. Sessions are HttpOnly, SameSite=Strict
// cookies; every form that acts carries a per-session CSRF token. Every
// action is logged with the role that did it (never the key). Pages carry
// no script at all: the assets are one embedded stylesheet, and a Content
// Security Policy forbids scripts, so an escaped payload stays inert even
// if escaping were ever missed.
package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

//go:embed templates/*.html static/*
var assets embed.FS

// staticFiles is what /static/ serves: the static folder alone. The whole
// of assets was served, so /static/%2e%2e/templates/ listed the templates
// and served their source, without sign-in (found in a review).
var staticFiles = func() fs.FS {
	sub, err := fs.Sub(assets, "static")
	if err != nil {
		panic(err) // "static" is a valid path
	}
	return sub
}()

// Defaults of Config.
const (
	SampleIntervalDefault = 10 * time.Second
	HistoryDefault        = time.Hour
	SessionTTLDefault     = 12 * time.Hour
	maxSessions           = 1000
)

// Config configures a Console.
type Config struct {
	// Admin is a client of the admin API. Required.
	Admin adminv1.AdminServiceClient
	// AdminKey signs in with every right; the console's calls carry it.
	// Required.
	AdminKey string
	// ReadOnlyKey, when set, signs in to look only: pages and dry runs,
	// no replay or cancel.
	ReadOnlyKey string
	// SecureCookies marks the session cookie Secure (for a console served
	// over HTTPS, directly or behind a proxy).
	SecureCookies bool
	// SampleInterval is how often queue stats are sampled for the charts.
	// Defaults to 10s.
	SampleInterval time.Duration
	// History is how much of the samples the charts show. Defaults to 1h.
	History time.Duration
	// SessionTTL is how long a sign-in lasts. Defaults to 12h.
	SessionTTL time.Duration
	// Logger logs sign-ins and actions. Defaults to slog.Default().
	Logger *slog.Logger
}

// Console is the web console's http.Handler.
type Console struct {
	cfg      Config
	log      *slog.Logger
	mux      *http.ServeMux
	pages    map[string]*template.Template
	hist     *history
	adminSum [32]byte
	roSum    [32]byte

	mu       sync.Mutex
	sessions map[string]*session
	// failedSignIns paces each client address's refused sign-ins: nothing
	// slowed a guesser, who tried 300 keys in 3.5 s (found in a review).
	failedSignIns map[string]*rate.Limiter

	stop context.CancelFunc
	done chan struct{}
}

// Refused sign-ins are answered at most this often per client address: a
// person who mistyped waits a moment at worst, a guesser gets two keys a
// second. At most maxSignInClients addresses are tracked; past that the
// record starts over.
const (
	failedSignInRate  = rate.Limit(2)
	failedSignInBurst = 10
	maxSignInClients  = 4096
)

// signInPace returns the limiter of refused sign-ins from remote (an
// http.Request's RemoteAddr).
func (c *Console) signInPace(remote string) *rate.Limiter {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.failedSignIns[host]
	if l == nil {
		if len(c.failedSignIns) >= maxSignInClients {
			clear(c.failedSignIns)
		}
		l = rate.NewLimiter(failedSignInRate, failedSignInBurst)
		c.failedSignIns[host] = l
	}
	return l
}

// New returns a console; Start begins sampling for the charts.
func New(cfg Config) (*Console, error) {
	if cfg.Admin == nil || cfg.AdminKey == "" {
		return nil, errors.New("console: Admin and AdminKey are required")
	}
	if cfg.ReadOnlyKey == cfg.AdminKey {
		return nil, errors.New("console: the read-only key must differ from the admin key")
	}
	cfg.SampleInterval = cmp.Or(cfg.SampleInterval, SampleIntervalDefault)
	cfg.History = cmp.Or(cfg.History, HistoryDefault)
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, SessionTTLDefault)
	c := &Console{
		cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), sessions: map[string]*session{},
		adminSum:      sha256.Sum256([]byte(cfg.AdminKey)),
		failedSignIns: map[string]*rate.Limiter{},
	}
	if cfg.ReadOnlyKey != "" {
		c.roSum = sha256.Sum256([]byte(cfg.ReadOnlyKey))
	}
	c.hist = newHistory(int(cfg.History / cfg.SampleInterval))
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// Start samples queue stats every SampleInterval until Stop or ctx ends.
func (c *Console) Start(ctx context.Context) {
	ctx, c.stop = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(c.cfg.SampleInterval)
		defer t.Stop()
		for {
			c.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends sampling and waits for it; it is safe to call more than once
// or without Start.
func (c *Console) Stop() {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
}

func (c *Console) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(c.apiContext(ctx), 5*time.Second)
	defer cancel()
	resp, err := c.cfg.Admin.GetQueueStats(ctx, &adminv1.GetQueueStatsRequest{})
	if err != nil {
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "console: sample queue stats", slog.Any("error", err))
		}
		return
	}
	c.hist.add(time.Now(), withFairness(lanesOf(resp.GetQueues()), c.fairness(ctx, 0)))
}

// fairness asks the drainers' fairness view for top tenants per lane (0:
// the API's default); nil when no drainer runs here or the call fails,
// which is logged unless the context ended.
func (c *Console) fairness(ctx context.Context, top int32) *adminv1.GetFairnessResponse {
	resp, err := c.cfg.Admin.GetFairness(ctx, &adminv1.GetFairnessRequest{Top: top})
	if err != nil {
		if status.Code(err) != codes.Unavailable && ctx.Err() == nil {
			c.log.WarnContext(ctx, "console: fairness view", slog.Any("error", err))
		}
		return nil
	}
	return resp
}

// apiContext carries the admin credential for a call of the admin API.
func (c *Console) apiContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.cfg.AdminKey)
}

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

// role is what a session may do.
type role int

const (
	roleAdmin role = iota + 1
	roleReadOnly
)

// String names the key that signed in, for the logs and the page.
func (r role) String() string {
	if r == roleReadOnly {
		return "read-only key"
	}
	return "admin key"
}

type session struct {
	id, csrf string
	role     role
	expires  time.Time
}

const sessionCookie = "sluice_console"

// keyRole says which key this is, comparing digests in constant time.
func (c *Console) keyRole(key string) (role, bool) {
	sum := sha256.Sum256([]byte(key))
	if subtle.ConstantTimeCompare(sum[:], c.adminSum[:]) == 1 {
		return roleAdmin, true
	}
	if c.cfg.ReadOnlyKey != "" && subtle.ConstantTimeCompare(sum[:], c.roSum[:]) == 1 {
		return roleReadOnly, true
	}
	return 0, false
}

func (c *Console) newSession(r role) *session {
	s := &session{id: randomToken(), csrf: randomToken(), role: r, expires: time.Now().Add(c.cfg.SessionTTL)}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for id, old := range c.sessions {
		if now.After(old.expires) {
			delete(c.sessions, id)
		}
	}
	if len(c.sessions) >= maxSessions {
		var oldest *session
		for _, old := range c.sessions {
			if oldest == nil || old.expires.Before(oldest.expires) {
				oldest = old
			}
		}
		delete(c.sessions, oldest.id)
	}
	c.sessions[s.id] = s
	return s
}

func (c *Console) sessionOf(r *http.Request) *session {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[ck.Value]
	if s == nil || time.Now().After(s.expires) {
		return nil
	}
	return s
}

func (c *Console) endSession(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sessions, s.id)
}

func (c *Console) setCookie(w http.ResponseWriter, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: c.cfg.SecureCookies, SameSite: http.SameSiteStrictMode,
	})
}

// randomToken is 256 bits from crypto/rand, as text.
func randomToken() string { return rand.Text() + rand.Text() }

// sameToken compares a submitted token with the expected one in
// constant time; an empty expected token matches nothing.
func sameToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", n, err)
		}
		pages[n[len("templates/"):len(n)-len(".html")]] = t
	}
	return pages, nil
}
