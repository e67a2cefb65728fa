package drainer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestClassifyHTTPStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		code       int
		retryAfter string
		want       string // ack, retry, permanent
		wantAfter  time.Duration
	}{
		{200, "", "ack", 0},
		{204, "", "ack", 0},
		{429, "7", "retry", 7 * time.Second},
		{503, "Mon, 23 Nov 2026 12:00:30 GMT", "retry", 30 * time.Second},
		{503, "", "retry", 0},
		{429, "soon", "retry", 0},
		{400, "", "permanent", 0},
		{404, "", "permanent", 0},
		{422, "", "permanent", 0},
		{500, "", "retry", 0},
		{502, "", "retry", 0},
		{301, "", "retry", 0},
		// The server gave up waiting for the request, or it came too
		// early: try again (they were dead-lettered at once).
		{408, "", "retry", 0},
		{425, "2", "retry", 2 * time.Second},
		// A huge Retry-After is capped, not overflowed into no wait.
		{503, "99999999999999999", "retry", maxRetryAfter},
		{503, "Fri, 01 Jan 2100 00:00:00 GMT", "retry", maxRetryAfter},
	}
	for _, tt := range tests {
		err := ClassifyHTTPStatus(tt.code, tt.retryAfter, now, "")
		if got := outcome(err); got != tt.want {
			t.Errorf("%d: got %s (%v), want %s", tt.code, got, err, tt.want)
		}
		var ra *RetryAfterError
		if errors.As(err, &ra) != (tt.wantAfter > 0) || (ra != nil && ra.After != tt.wantAfter) {
			t.Errorf("%d Retry-After %q: got %v, want %s", tt.code, tt.retryAfter, err, tt.wantAfter)
		}
	}
}

// TestWebhookErrorsCarryTheBody: every failed answer's error (the job's
// last error) names its status and the start of its body, trimmed.
func TestWebhookErrorsCarryTheBody(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		code int
		body string
		want string
	}{
		{400, "bad payload\n", "webhook: 400 Bad Request: bad payload"},
		{500, "  db down\r\n", "webhook: 500 Internal Server Error: db down"},
		{503, "", "webhook: 503 Service Unavailable"},
		{429, "slow down", "webhook: 429 Too Many Requests: slow down"},
	} {
		if err := ClassifyHTTPStatus(tt.code, "", now, tt.body); err == nil || err.Error() != tt.want {
			t.Errorf("%d %q: %v, want %q", tt.code, tt.body, err, tt.want)
		}
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ack"
	case IsPermanent(err):
		return "permanent"
	}
	return "retry"
}

func TestWebhookPostsSignedJob(t *testing.T) {
	t.Parallel()
	var got webhookBody
	var sig string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte("s3cret"))
		mac.Write(body)
		sig = "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if r.Header.Get("X-Sluice-Signature") != sig || r.Header.Get("Idempotency-Key") != "job-1" {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		_ = json.Unmarshal(body, &got)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	w := &Webhook{URL: srv.URL, Secret: "s3cret"}
	job := &Job{ID: "job-1", Tenant: "acme", Lane: "std", Attempt: 2, Payload: []byte{0, 1, 2}, EnqueuedAt: time.Unix(100, 0)}
	if err := w.Handle(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	if got.JobID != "job-1" || got.Tenant != "acme" || got.Attempt != 2 || string(got.Payload) != "\x00\x01\x02" {
		t.Fatalf("webhook got %+v", got)
	}
}

func TestWebhookUnreachableRetries(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	err := (&Webhook{URL: url}).Handle(t.Context(), &Job{ID: "x"})
	if err == nil || IsPermanent(err) {
		t.Fatalf("unreachable webhook: %v, want a retryable error", err)
	}
}

// TestWebhookRedirectIsAFailedAttempt: a 301, 302 or 303 from the webhook
// URL (http to https, a trailing slash) is not followed. Go's client
// followed it as a GET without the body, and a 2xx there acked a job that
// was never delivered (found in review).
func TestWebhookRedirectIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect} {
		var followed atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hook" {
				http.Redirect(w, r, "/hook/", code)
				return
			}
			followed.Add(1)
			w.WriteHeader(http.StatusOK)
		}))
		err := (&Webhook{URL: srv.URL + "/hook"}).Handle(t.Context(), &Job{ID: "j", Payload: []byte("payload")})
		srv.Close()
		if err == nil || followed.Load() != 0 || !strings.Contains(err.Error(), "/hook/") {
			t.Errorf("%d redirect: err %v, %d requests to its target; want a failed attempt naming the target, none followed", code, err, followed.Load())
		}
		if IsPermanent(err) {
			t.Errorf("%d redirect: a permanent failure; want a retry", code)
		}
	}
}

// TestWebhookReusesConnections: a receiver whose answers have bodies
// longer than the snippet kept for the error (an echo of the job, say)
// gets one connection for a run of deliveries, not one each. The rest of
// the body was left unread, so Go's client closed every connection after
// its answer: a new TCP (and TLS) handshake per job, and sockets in
// TIME_WAIT piling up under load.
func TestWebhookReusesConnections(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusOK, http.StatusInternalServerError} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			t.Parallel()
			var conns atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(code)
				_, _ = w.Write([]byte(strings.Repeat("x", 4096)))
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			w := &Webhook{URL: srv.URL, Client: &http.Client{Transport: &http.Transport{}}}
			t.Cleanup(w.Client.CloseIdleConnections)
			for i := range 5 {
				_ = w.Handle(t.Context(), &Job{ID: fmt.Sprint(i), EnqueuedAt: time.Now()})
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("5 deliveries in turn opened %d connections, want 1", n)
			}
		})
	}
}
