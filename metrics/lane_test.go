package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLaneSeries checks that a lane's series handle records into the same
// series as the Metrics methods, makes none before its first use, and
// records nothing from a nil *Metrics.
func TestLaneSeries(t *testing.T) {
	t.Parallel()
	m, bundle := setup(t, Options{})
	l := m.Lane("premium")
	if n, err := testutil.GatherAndCount(bundle.reg, NameDwell, NameAgeOfFirstAttempt, NameDrainActions); err != nil || n != 0 {
		t.Fatalf("%d series before any use (err %v), want 0: a series appears with its first figure", n, err)
	}
	l.Dwell(2 * time.Second)
	m.Dwell("premium", 40*time.Second)
	l.AgeOfFirstAttempt(time.Second)
	l.Delivered()
	m.Drain("premium", ActionDelivered, "")
	l.Delivered()

	if got := testutil.CollectAndCount(m.dwell); got != 1 {
		t.Errorf("dwell has %d series, want 1 (the handle's and the method's are one)", got)
	}
	if got := sumFamily(t, bundle.reg, NameDrainActions); got != 3 {
		t.Errorf("delivered = %v, want 3", got)
	}
	if got := testutil.CollectAndCount(m.ageOfFirstAttempt); got != 1 {
		t.Errorf("age of first attempt has %d series, want 1", got)
	}

	var none *Metrics
	nl := none.Lane("premium")
	nl.Dwell(time.Second)
	nl.AgeOfFirstAttempt(time.Second)
	nl.Delivered()
}
