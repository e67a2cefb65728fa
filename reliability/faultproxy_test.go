package reliability

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestFaultProxy checks each fault's effect on the caller and on what
// reaches the server behind the proxy (an HTTP server answering like SQS's
// SendMessageBatch: every entry it receives succeeds).
func TestFaultProxy(t *testing.T) {
	t.Parallel()
	var served atomic.Int64
	var lastEntries atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		var req struct{ Entries []struct{ ID string } }
		_ = json.NewDecoder(r.Body).Decode(&req)
		lastEntries.Store(int64(len(req.Entries)))
		var ok []map[string]string
		for _, e := range req.Entries {
			ok = append(ok, map[string]string{"Id": e.ID, "MessageId": "m" + e.ID})
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_ = json.NewEncoder(w).Encode(map[string]any{"Successful": ok})
	}))
	defer upstream.Close()
	proxy, err := StartFaultProxy(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	body := `{"QueueUrl":"q","Entries":[{"Id":"0","MessageBody":"a"},{"Id":"1","MessageBody":"b"},{"Id":"2","MessageBody":"c"}]}`
	call := func() (*http.Response, []byte, error) {
		req, _ := http.NewRequest(http.MethodPost, proxy.URL()+"/", strings.NewReader(body))
		req.Header.Set("X-Amz-Target", "AmazonSQS.SendMessageBatch")
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	type answer struct {
		Successful []struct{ ID string }
		Failed     []struct{ ID, Code string }
		Type       string `json:"__type"`
	}

	tests := []struct {
		fault       Fault
		wantErr     bool // the caller sees a transport error
		wantServed  bool
		wantStatus  int
		wantType    string
		wantPartial bool
	}{
		{fault: "", wantServed: true, wantStatus: 200},
		{fault: FaultLatency, wantServed: true, wantStatus: 200},
		{fault: FaultResetBefore, wantErr: true},
		{fault: FaultResetAfter, wantErr: true, wantServed: true},
		{fault: FaultThrottle, wantStatus: 400, wantType: "Throttl"},
		{fault: FaultPartial, wantServed: true, wantStatus: 200, wantPartial: true},
	}
	for _, tt := range tests {
		name := string(tt.fault)
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			if tt.fault == "" {
				proxy.Set(nil, 0)
			} else {
				proxy.Set([]Fault{tt.fault}, 1)
			}
			before := served.Load()
			resp, b, err := call()
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %t", err, tt.wantErr)
			}
			if got := served.Load() > before; got != tt.wantServed {
				t.Fatalf("reached the server: %t, want %t", got, tt.wantServed)
			}
			if tt.wantErr {
				return
			}
			var a answer
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatalf("answer %q: %v", b, err)
			}
			if resp.StatusCode != tt.wantStatus || !strings.Contains(a.Type, tt.wantType) {
				t.Fatalf("status %d type %q, want %d %q", resp.StatusCode, a.Type, tt.wantStatus, tt.wantType)
			}
			if tt.wantType != "" && resp.Header.Get("X-Amzn-Query-Error") == "" {
				t.Error("no X-Amzn-Query-Error header on an error answer")
			}
			if tt.wantStatus == 200 {
				forwarded := int(lastEntries.Load())
				if len(a.Successful) != forwarded || len(a.Successful)+len(a.Failed) != 3 {
					t.Fatalf("%d successful, %d failed, %d forwarded: want the forwarded ones successful and the rest failed", len(a.Successful), len(a.Failed), forwarded)
				}
				if tt.wantPartial != (len(a.Failed) > 0) {
					t.Fatalf("failed entries %v, want some: %t", a.Failed, tt.wantPartial)
				}
			}
		})
	}
	if inj := proxy.Injected(); inj[FaultPartial] != 1 || inj[FaultResetAfter] != 1 {
		t.Errorf("injected %v, want one of each", inj)
	}
}
