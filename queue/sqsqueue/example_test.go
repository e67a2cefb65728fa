package sqsqueue_test

import (
	"context"
	"log"
	"time"

	"github.com/sluice-dev/sluice/queue"
	"github.com/sluice-dev/sluice/queue/sqsqueue"
)

// A backend on AWS with queue URLs from Terraform's outputs; credentials
// come from the SDK's default chain (environment, instance role, …).
func ExampleNew() {
	ctx := context.Background()
	b, err := sqsqueue.New(ctx, sqsqueue.Config{
		Region: "eu-west-1",
		QueueURLs: map[string]string{
			"jobs-standard-0": "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs-standard-0",
		},
		Linger: 5 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	res, err := b.Send(ctx, &queue.SendParams{Queue: "jobs-standard-0", Entries: []queue.SendEntry{
		{ID: "job-1", Body: []byte{0x0a, 0x03, 'a', 'b', 'c'}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	if res[0].Err != nil {
		log.Print(res[0].Err)
	}
	log.Printf("API calls so far: %v", b.APICalls())
}
