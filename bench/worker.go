package bench

import "github.com/sluice-dev/sluice/internal/testcluster"

// Worker is the recording gRPC worker the drainers deliver to.
type Worker = testcluster.Worker

// Delivery is one job's first delivery as the worker saw it.
type Delivery = testcluster.Delivery

// StartWorker serves a worker that acknowledges every job after its
// service time (SetService, SetTenantService) on 127.0.0.1 until Stop.
func StartWorker() (*Worker, error) { return testcluster.StartWorker(nil) }
