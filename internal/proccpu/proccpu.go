// Package proccpu reads the CPU time this process has used, for
// benchmarks that report CPU per operation: on a shared machine a
// benchmark's wall-clock rate moves with its neighbours' load, while the
// CPU it spends per job mostly does not.
package proccpu

import (
	"syscall"
	"time"
)

// Used returns the CPU time the process has used so far, user and system;
// 0 if the system does not say.
func Used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
