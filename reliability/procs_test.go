package reliability

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortBelowEphemeralRange(t *testing.T) {
	t.Parallel()
	lo := ephemeralLow()
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
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the port FreePort returned is not free: %v", err)
		}
		lis.Close()
	}
}
