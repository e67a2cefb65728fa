package embeddedqueue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/embeddedqueue"
)

func Example() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	b, err := embeddedqueue.Open(filepath.Join(dir, "queues.db"), embeddedqueue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	ctx := context.Background()
	err = b.EnsureQueues(ctx, []queue.QueueSpec{
		{Name: "jobs-dlq"},
		{Name: "jobs", VisibilityTimeout: time.Minute, DeadLetterQueue: "jobs-dlq", MaxReceiveCount: 5},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Send returns once the message is fsynced.
	if _, err := b.Send(ctx, &queue.SendParams{Queue: "jobs", Entries: []queue.SendEntry{{ID: "1", Body: []byte("hello")}}}); err != nil {
		log.Fatal(err)
	}
	msgs, err := b.Receive(ctx, &queue.ReceiveParams{Queue: "jobs", Max: queue.MaxBatch, Wait: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(msgs[0].Body), msgs[0].ReceiveCount)
	// The receipt handle is the lease: it deletes the message until
	// someone else receives it.
	res, err := b.Delete(ctx, &queue.DeleteParams{Queue: "jobs", ReceiptHandles: []string{msgs[0].ReceiptHandle}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res[0])
	// Output:
	// hello 1
	// <nil>
}
