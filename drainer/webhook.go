package drainer

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhook delivers jobs by HTTP POST of a JSON document:
//
//	{"job_id": "…", "tenant": "…", "lane": "…", "attempt": 1,
//	 "enqueued_at": "2026-11-23T12:00:00Z", "attributes": {…}, "payload": "<base64>"}
//
// The response decides the job's fate:
//
//	2xx                      ack
//	408, 425, 429, 503       retry, no sooner than Retry-After (seconds or HTTP date)
//	other 4xx                permanent: dead-letter
//	5xx, timeout, no answer  retry with backoff
//
// Each request carries the job's W3C trace context (Job.TraceContext) as
// traceparent and tracestate headers when it has one.
//
// With a Secret, each request carries X-Sluice-Signature: sha256=<hex HMAC
// of the body>, so the receiver can check it came from sluice.
type Webhook struct {
	URL    string
	Secret string
	// Client defaults to one that does not follow redirects (a
	// redirected POST is re-sent as a GET without its body). A request
	// lasts at most the drainer's handler timeout (its context).
	Client *http.Client
}

type webhookBody struct {
	JobID      string            `json:"job_id"`
	Tenant     string            `json:"tenant"`
	Lane       string            `json:"lane"`
	Attempt    int               `json:"attempt"`
	EnqueuedAt time.Time         `json:"enqueued_at"`
	Attributes map[string]string `json:"attributes,omitempty"`
	Payload    []byte            `json:"payload"`
}

var defaultWebhookClient = &http.Client{
	// No Timeout of its own: the request's context carries the drainer's
	// --handler-timeout. A 30 s one here cut every slower webhook short
	// whatever that flag said (found in review).
	//
	// A redirect is answered, not followed: Go's client re-sends a POST
	// redirected by 301, 302 or 303 as a GET without its body, so a 2xx
	// from the new location acked a job that was never delivered (found
	// in review), and the signature went to a host not configured. A 3xx
	// is a failed attempt that names where the URL points.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Handle posts job to the webhook URL.
func (w *Webhook) Handle(ctx context.Context, job *Job) error {
	body, err := json.Marshal(webhookBody{
		JobID: job.ID, Tenant: job.Tenant, Lane: job.Lane, Attempt: job.Attempt,
		EnqueuedAt: job.EnqueuedAt.UTC(), Attributes: job.Attributes, Payload: job.Payload,
	})
	if err != nil {
		return Permanent(fmt.Errorf("encode webhook body: %w", err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return Permanent(fmt.Errorf("webhook request: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", job.ID)
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := job.TraceContext[k]; v != "" {
			req.Header.Set(k, v)
		}
	}
	if w.Secret != "" {
		mac := hmac.New(sha256.New, []byte(w.Secret))
		mac.Write(body)
		req.Header.Set("X-Sluice-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	}
	client := w.Client
	if client == nil {
		client = defaultWebhookClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	defer func() {
		// The rest of the body is read, up to a bound, so that the
		// connection is kept for the next delivery: one closed with its
		// body unread is not, and every answer longer than the snippet
		// cost a new connection (and TLS handshake) per job.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDiscard))
		resp.Body.Close()
	}()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if loc := resp.Header.Get("Location"); resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
		return fmt.Errorf("webhook: %d %s to %s: redirects are not followed; set the webhook URL to where it points", resp.StatusCode, http.StatusText(resp.StatusCode), loc)
	}
	return ClassifyHTTPStatus(resp.StatusCode, resp.Header.Get("Retry-After"), time.Now(), string(snippet))
}

// maxDiscard is the most of an answer's body read past its snippet, to
// keep the connection; a longer one closes it.
const maxDiscard = 256 << 10

// ClassifyHTTPStatus maps a webhook response to the drainer's outcome (see
// Webhook).
// The error names the answer's status and, when it has one, the start of
// its body, trimmed: what the receiver said is the job's last error, for
// every failure alike (a 500's body was dropped, and a 400's kept its
// trailing newline; found in a walkthrough).
func ClassifyHTTPStatus(code int, retryAfter string, now time.Time, body string) error {
	if code >= 200 && code < 300 {
		return nil
	}
	msg := fmt.Sprintf("webhook: %d %s", code, http.StatusText(code))
	if body = strings.TrimSpace(body); body != "" {
		msg += ": " + body
	}
	err := errors.New(msg)
	switch {
	case transientHTTP(code):
		if d, ok := parseRetryAfter(retryAfter, now); ok {
			return RetryAfter(err, d)
		}
		return err
	case code >= 400 && code < 500:
		return Permanent(err)
	default:
		return err
	}
}

// transientHTTP reports whether a 4xx or 5xx answer says "not now"
// rather than "never": 408 (the server gave up waiting for the request),
// 425 (too early), 429 (too many requests) and 503 (unavailable). These
// are retried no sooner than their Retry-After; the other 4xx are
// permanent.
func transientHTTP(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	}
	return false
}

// maxRetryAfter bounds a Retry-After: longer waits are read as this one
// (the retry delay is capped far below it anyway), where multiplying
// them into a time.Duration overflowed to a negative, ignored wait.
const maxRetryAfter = 365 * 24 * time.Hour

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}
