package worker

import "time"

// A dead connection is found within about 11s in tests, not 40s (gRPC
// pings no more often than every 10s).
func init() { keepaliveTime, keepaliveTimeout = 10*time.Second, time.Second }
