// Package procstat reads figures about a running process from Linux's
// /proc, for the benchmark and reliability harnesses that watch the real
// binaries.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// RSS returns the resident set size of process pid in bytes (VmRSS in
// /proc/<pid>/status).
func RSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read RSS of pid %d: %w", pid, err)
	}
	return parseRSS(string(data), pid)
}

func parseRSS(status string, pid int) (int64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("read RSS of pid %d: unexpected VmRSS line %q", pid, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read RSS of pid %d: %w", pid, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("read RSS of pid " + strconv.Itoa(pid) + ": no VmRSS line")
}
