package cloudwatchpub_test

import (
	"context"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/cloudwatchpub"
)

func ExampleNewPublisher() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx) // region and credentials as usual
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.Options{})

	pub := cloudwatchpub.NewPublisher(cloudwatchpub.PublisherConfig{
		Client:     cloudwatch.NewFromConfig(awsCfg),
		Gatherer:   reg, // the registry /metrics serves: the same figures
		Registerer: reg, // the publisher's own sluice_cloudwatch_* counters
	})
	if err := pub.Start(ctx); err != nil {
		log.Fatal(err)
	}
	m.Submit("acme", "premium", "premium", metrics.OutcomeAdmitted)

	// At shutdown: stop the timer and publish the last interval.
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pub.Stop(stopCtx); err != nil {
		log.Print(err)
	}
}
