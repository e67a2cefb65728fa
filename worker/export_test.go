package worker

import "time"

// A dead connection is found within about 11s in tests, not 40s (gRPC
// pings no more often than every 10s).
func init() { keepaliveTime, keepaliveTimeout = 10*time.Second, time.Second }

// A stop that ran out of time leaves a handler that ignores its context after
// 1s, not 5s.
func init() { cancelGrace = time.Second }
