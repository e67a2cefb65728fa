package bench

import (
	"fmt"
	"os/exec"
	"syscall"
)

// StartHogs starts n busy-loop processes (sh -c 'while :; do :; done'),
// each taking a whole CPU while the scheduler lets it, to starve the
// processes measured beside them. stop kills them and waits for them.
func StartHogs(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		// The hog dies with the harness, even if the harness is killed.
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("start busy loop: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}
