package testcluster

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes the computer a run measured, read from /proc.
type Machine struct {
	Cores  int    `json:"cores"`
	CPU    string `json:"cpu"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
}

// ReadMachine returns the machine's cores, CPU model and kernel.
func ReadMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), CPU: "unknown CPU", Kernel: "unknown kernel", Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.Join(strings.Fields(v), " ")
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}

func (m Machine) String() string {
	return fmt.Sprintf("%d cores, %s, %s", m.Cores, m.CPU, m.Kernel)
}

// LoadAvg returns /proc/loadavg's 1-minute figure, or "?" if unreadable:
// it says how busy the shared machine was around a measurement.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
