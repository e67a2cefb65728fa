package testcluster

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortBelowEphemeralRange(t *testing.T) {
	t.Parallel()
	lo := ephemeralLow()
	seen := map[string]bool{}
	for range 20 {
		addr, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		p, err := strconv.Atoi(port)
		if err != nil || p < freePortFloor || p >= lo {
			t.Fatalf("FreePort = %s: want a loopback port in [%d, %d)", addr, freePortFloor, lo)
		}
		if seen[addr] {
			t.Fatalf("FreePort handed out %s twice", addr)
		}
		seen[addr] = true
	}
}
