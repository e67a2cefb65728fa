package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault is one kind of failure the proxy injects into a request to the
// SQS-compatible server.
type Fault string

// Faults the proxy injects. "Before" faults never reach the server;
// "after" ones let it act and then lose or spoil the answer, so the caller
// cannot tell whether the request took effect.
const (
	// FaultLatency delays the request by 50–400 ms.
	FaultLatency Fault = "latency"
	// FaultResetBefore resets the connection (TCP RST) before forwarding.
	FaultResetBefore Fault = "reset_before"
	// FaultResetAfter forwards the request, then resets the connection
	// instead of answering.
	FaultResetAfter Fault = "reset_after"
	// FaultHang never answers: the caller's timeout has to end the call.
	FaultHang Fault = "hang"
	// Fault500 answers HTTP 500 InternalError (half the time after the
	// server acted).
	Fault500 Fault = "http_500"
	// Fault503 answers HTTP 503 ServiceUnavailable (half the time after the
	// server acted).
	Fault503 Fault = "http_503"
	// FaultThrottle answers HTTP 400 RequestThrottled or
	// ThrottlingException, as SQS does past its request rate.
	FaultThrottle Fault = "throttle"
	// FaultPartial makes a batch call (SendMessageBatch,
	// DeleteMessageBatch, ChangeMessageVisibilityBatch) fail some of its
	// entries: they are not forwarded, and the answer lists them as Failed
	// with InternalError, as SQS does when part of a batch fails.
	FaultPartial Fault = "partial_batch"
)

// AllFaults lists every fault kind.
var AllFaults = []Fault{FaultLatency, FaultResetBefore, FaultResetAfter, FaultHang, Fault500, Fault503, FaultThrottle, FaultPartial}

// hangLimit bounds a hung request, for a caller with no timeout.
const hangLimit = time.Minute

// FaultProxy is an HTTP proxy in front of the SQS-compatible server that
// injects faults into a chosen share of requests. The binaries under test
// use its URL as their SQS endpoint.
type FaultProxy struct {
	target    string
	lis       net.Listener
	srv       *http.Server
	transport *http.Transport

	mu       sync.Mutex
	faults   []Fault
	prob     float64
	injected map[Fault]int64
	ops      map[string]int64 // requests by SQS operation
	requests int64
}

// StartFaultProxy listens on a loopback port and forwards to target (the
// server's base URL).
func StartFaultProxy(target string) (*FaultProxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy listener: %w", err)
	}
	p := &FaultProxy{
		target: strings.TrimSuffix(target, "/"), lis: lis,
		transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
		injected:  map[Fault]int64{}, ops: map[string]int64{},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

// URL is the proxy's base URL.
func (p *FaultProxy) URL() string { return "http://" + p.lis.Addr().String() }

// Close stops the proxy, cutting requests under way.
func (p *FaultProxy) Close() error {
	err := p.srv.Close()
	p.transport.CloseIdleConnections()
	return err
}

// Set makes each request suffer one of faults (chosen at random) with
// probability prob; no faults, or prob 0, passes everything through.
func (p *FaultProxy) Set(faults []Fault, prob float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults, p.prob = slices.Clone(faults), prob
}

// Injected returns the faults injected so far, by kind.
func (p *FaultProxy) Injected() map[Fault]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.injected)
}

// Ops returns the requests seen so far by SQS operation, and their total.
func (p *FaultProxy) Ops() (map[string]int64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.ops), p.requests
}

// pick decides the fault for one request ("" for none).
func (p *FaultProxy) pick(op string) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	p.ops[op]++
	if len(p.faults) == 0 || rand.Float64() >= p.prob {
		return ""
	}
	f := p.faults[rand.N(len(p.faults))]
	if f == FaultPartial && !isBatchOp(op) {
		return ""
	}
	p.injected[f]++
	return f
}

func isBatchOp(op string) bool {
	switch op {
	case "SendMessageBatch", "DeleteMessageBatch", "ChangeMessageVisibilityBatch":
		return true
	}
	return false
}

func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	fault := p.pick(op)
	after := rand.N(2) == 0
	switch fault {
	case FaultLatency:
		sleepCtx(r.Context(), 50*time.Millisecond+rand.N(350*time.Millisecond))
	case FaultResetBefore:
		reset(w)
		return
	case FaultHang:
		sleepCtx(r.Context(), hangLimit)
		reset(w)
		return
	case Fault500, Fault503, FaultThrottle:
		if fault == FaultThrottle || !after {
			writeSQSError(w, fault)
			return
		}
	}
	var dropped []string
	if fault == FaultPartial {
		body, dropped = dropEntries(body)
	}
	status, header, respBody, err := p.forward(r, body)
	if err != nil {
		reset(w)
		return
	}
	switch fault {
	case FaultResetAfter:
		reset(w)
		return
	case Fault500, Fault503:
		writeSQSError(w, fault)
		return
	case FaultPartial:
		if status == http.StatusOK {
			respBody = addFailed(respBody, dropped)
		}
	}
	for k, vs := range header {
		if k == "Content-Length" {
			continue
		}
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(respBody)))
	w.WriteHeader(status)
	_, _ = w.Write(respBody)
}

// forward sends the request to the server and reads the whole answer.
func (p *FaultProxy) forward(r *http.Request, body []byte) (int, http.Header, []byte, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	for k, vs := range r.Header {
		if k == "Content-Length" || k == "Connection" {
			continue
		}
		out.Header[k] = vs
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, respBody, nil
}

// reset closes the client's connection with a TCP RST.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// writeSQSError answers in the AWS JSON 1.0 protocol's error shape, with
// the query-compatible error header SQS sends.
func writeSQSError(w http.ResponseWriter, f Fault) {
	status, typ, query := http.StatusInternalServerError, "com.amazonaws.sqs#InternalError", "InternalError;Receiver"
	switch f {
	case Fault503:
		status, typ, query = http.StatusServiceUnavailable, "com.amazonaws.sqs#ServiceUnavailable", "ServiceUnavailable;Receiver"
	case FaultThrottle:
		status, typ, query = http.StatusBadRequest, "com.amazonaws.sqs#RequestThrottled", "RequestThrottled;Sender"
		if rand.N(2) == 0 {
			typ, query = "com.amazon.coral.availability#ThrottlingException", "ThrottlingException;Sender"
		}
	}
	body, _ := json.Marshal(map[string]string{"__type": typ, "message": "injected by the reliability fault proxy"})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Query-Error", query)
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// dropEntries removes a random non-empty subset of a batch request's
// entries (keeping at least one) and returns the new body and the
// dropped entry ids. A body it cannot read is returned unchanged.
func dropEntries(body []byte) ([]byte, []string) {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil {
		return body, nil
	}
	var entries []map[string]json.RawMessage
	if json.Unmarshal(req["Entries"], &entries) != nil || len(entries) < 2 {
		return body, nil
	}
	var keep []map[string]json.RawMessage
	var dropped []string
	for i, e := range entries {
		var id string
		_ = json.Unmarshal(e["Id"], &id)
		if i > 0 && (len(dropped) == 0 || rand.N(2) == 0) && len(keep) > 0 {
			dropped = append(dropped, id)
			continue
		}
		keep = append(keep, e)
	}
	raw, err := json.Marshal(keep)
	if err != nil {
		return body, nil
	}
	req["Entries"] = raw
	out, err := json.Marshal(req)
	if err != nil {
		return body, nil
	}
	return out, dropped
}

// addFailed adds the dropped entries to a batch answer's Failed list.
func addFailed(body []byte, dropped []string) []byte {
	var resp map[string]json.RawMessage
	if json.Unmarshal(body, &resp) != nil {
		return body
	}
	var failed []map[string]any
	if raw, ok := resp["Failed"]; ok {
		if json.Unmarshal(raw, &failed) != nil {
			return body
		}
	}
	for _, id := range dropped {
		failed = append(failed, map[string]any{"Id": id, "SenderFault": false, "Code": "InternalError", "Message": "injected partial batch failure"})
	}
	raw, err := json.Marshal(failed)
	if err != nil {
		return body
	}
	resp["Failed"] = raw
	out, err := json.Marshal(resp)
	if err != nil {
		return body
	}
	return out
}
