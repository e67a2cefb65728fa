package bench

import (
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// Worker is the recording gRPC worker the drainers deliver to.
type Worker = testcluster.Worker

// Delivery is one job's first delivery as the worker saw it.
type Delivery = testcluster.Delivery

// StartWorker serves a worker that acknowledges every job after its
// service time (service, or SetService and SetTenantService later) on
// 127.0.0.1 until Stop.
func StartWorker(service time.Duration) (*Worker, error) {
	w, err := testcluster.StartWorker(nil)
	if err == nil {
		w.SetService(service)
	}
	return w, err
}
