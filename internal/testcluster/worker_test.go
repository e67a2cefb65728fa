package testcluster

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	workerv1 "github.com/sluice-dev/sluice/gen/sluice/worker/v1"
)

// TestWorkerRecords calls a worker over gRPC, with an answer that fails
// each job's first call, and checks what it recorded.
func TestWorkerRecords(t *testing.T) {
	t.Parallel()
	w, err := StartWorker(func(_ context.Context, _ *workerv1.ProcessRequest, call int) error {
		if call == 1 {
			return status.Error(codes.Unavailable, "first call fails")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	conn, err := Dial(w.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := workerv1.NewWorkerServiceClient(conn)
	for _, c := range []struct {
		id, payload string
		want        codes.Code
	}{{"a", "a1", codes.Unavailable}, {"a", "a2", codes.OK}, {"b", "b1", codes.Unavailable}} {
		_, err := client.Process(t.Context(), &workerv1.ProcessRequest{JobId: c.id, Tenant: "t", Payload: []byte(c.payload)})
		if got := status.Code(err); got != c.want {
			t.Fatalf("Process(%s, %s) = %v, want %v", c.id, c.payload, got, c.want)
		}
	}
	acked, payloads := w.Acked()
	if len(acked) != 1 || acked["a"] != 1 || payloads["a"] != "a2" || payloads["b"] != "b1" {
		t.Errorf("Acked = %v, %v; want a acknowledged once, last payloads a2 and b1", acked, payloads)
	}
	if ds, repeats := w.Deliveries(); len(ds) != 2 || repeats != 1 || w.Calls() != 3 || w.Count() != 2 {
		t.Errorf("Deliveries = %v, %d repeats, %d calls; want a and b, 1 repeat, 3 calls", ds, repeats, w.Calls())
	}
	if !w.Delivered("a") || w.Delivered("b") || w.Job("b").GetTenant() != "t" {
		t.Errorf("Delivered(a) = %v, Delivered(b) = %v; want true, false", w.Delivered("a"), w.Delivered("b"))
	}
	if err := w.WaitDelivered(t.Context(), []string{"b"}, 200*time.Millisecond); err == nil {
		t.Error("WaitDelivered(b) succeeded; b was never acknowledged")
	}
	w.Reset()
	if w.Count() != 0 || w.Job("a") != nil {
		t.Errorf("after Reset: %d deliveries, job a %v", w.Count(), w.Job("a"))
	}
}
