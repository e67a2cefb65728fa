package sqsqueue_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/sluice-dev/sluice/internal/syncbuf"
	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
	"github.com/sluice-dev/sluice/test/fauxqs"
)

// TestReceiveAnswerLost: a ReceiveMessage that SQS answers (200) but
// whose answer breaks off while it is read is counted and logged as a
// lost answer, whose messages stay hidden for their visibility timeout.
// That case makes one attempt: whether the SDK retries a cut-off answer
// depends on how the break reaches it (a read error, or a reset
// connection), which varied with the machine's load, and a retry would
// hand over the next answer's message. An answer that is an error (500) is not a lost answer:
// SQS handed nothing over, and the SDK's retry receives the message.
func TestReceiveAnswerLost(t *testing.T) {
	const body = "aGk=" // "hi", base64 as the backend sends bodies
	sum := md5.Sum([]byte(body))
	full := fmt.Sprintf(`{"Messages":[{"MessageId":"m1","ReceiptHandle":"r1","Body":%q,"MD5OfBody":%q}]}`, body, hex.EncodeToString(sum[:]))
	for _, tt := range []struct {
		name     string
		first    func(w http.ResponseWriter) // the first attempt's answer
		wantLost int64
		wantErr  bool
		attempts int // the backend's MaxAttempts; 0 for its default
	}{
		{"answer cut off while read", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.Header().Set("Content-Length", fmt.Sprint(len(full)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(full[:len(full)/2]))
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, 1, true, 1},
		{"server error", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"__type":"InternalError","message":"try again"}`))
		}, 0, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			attempts := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				attempts++
				n := attempts
				mu.Unlock()
				if n == 1 {
					tt.first(w)
					return
				}
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				_, _ = w.Write([]byte(full))
			}))
			defer srv.Close()
			var logs syncbuf.Buffer
			b, err := sqsqueue.New(context.Background(), sqsqueue.Config{
				Endpoint: srv.URL, Region: fauxqs.Region, QueueURLs: map[string]string{"q": srv.URL + "/000000000000/q"},
				Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
				MaxBackoff:  time.Millisecond,
				MaxAttempts: tt.attempts,
				Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			msgs, err := b.Receive(context.Background(), &queue.ReceiveParams{Queue: "q", Max: queue.MaxBatch, VisibilityTimeout: 30 * time.Second})
			if tt.wantErr {
				if err == nil || len(msgs) != 0 {
					t.Errorf("Receive = %v, %v; want an error and no message", msgs, err)
				}
			} else if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "hi" {
				t.Errorf("Receive = %v, %v; want the retry's one message", msgs, err)
			}
			if got := b.ReceiveAnswersLost(); got != tt.wantLost {
				t.Errorf("ReceiveAnswersLost = %d, want %d", got, tt.wantLost)
			}
			if logged := strings.Contains(logs.String(), "the answer could not be read"); logged != (tt.wantLost > 0) {
				t.Errorf("lost answer logged: %v, want %v; log:\n%s", logged, tt.wantLost > 0, logs.String())
			}
		})
	}
}
