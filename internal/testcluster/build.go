package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/sluice-dev/sluice/test/fauxqs"
)

// SQSEnv is the environment of a process talking to the local
// SQS-compatible server: it accepts any credentials.
var SQSEnv = []string{"AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION=" + fauxqs.Region}

// ModuleDir returns the root of the sluice module.
func ModuleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// Build compiles the module's commands (e.g. "gateway", "drainer", the
// directories under cmd/) into dir, with the race detector if race.
func Build(ctx context.Context, dir string, race bool, cmds ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	for _, c := range cmds {
		args = append(args, "./cmd/"+c)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = ModuleDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", strings.Join(cmds, ", "), err, out)
	}
	return nil
}

// FreePort returns a loopback address with a port that was free a moment
// ago. Processes that restart keep their address, so clients reconnect.
//
// The port is picked below the kernel's ephemeral range: a port the kernel
// handed out (":0") is one it may soon give to an outgoing connection's
// local end, and under the harness's load (thousands of connections to
// the SQS-compatible server) that took a restarting gateway's address.
//
// A port is never handed out twice by one process: a port that is free
// because its process was just killed and is about to restart on it must
// not go to another cluster.
func FreePort() (string, error) {
	lo := ephemeralLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	var lastErr error
	for range 100 {
		port := freePortFloor + rand.N(lo-freePortFloor)
		if handedOut.ports[port] {
			continue
		}
		lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			lastErr = err
			continue
		}
		handedOut.ports[port] = true
		addr := lis.Addr().String()
		return addr, lis.Close()
	}
	return "", fmt.Errorf("find a free port below %d: %w", lo, lastErr)
}

// handedOut holds the ports FreePort has returned.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePortFloor is the lowest port FreePort picks.
const freePortFloor = 10000

// ephemeralLow returns the first port of the kernel's ephemeral range
// (32768 by default on Linux).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > freePortFloor+1000 {
				return lo
			}
		}
	}
	return 32768
}
