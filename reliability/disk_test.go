package reliability

import "testing"

// TestDiskFaults runs the embedded backend on a small tmpfs: read-only at
// start, then full under load.
func TestDiskFaults(t *testing.T) {
	t.Parallel()
	res, err := RunDisk(t.Context(), testEnv(t), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != "" {
		t.Skip(res.Skipped)
	}
	t.Logf("read-only: %s", res.ReadOnlyExit)
	t.Logf("full: %v; error %q; survived %t; restart on the full disk: %s; recovered live %t in %s; %+v", res.Load.Codes, res.FullError, res.SurvivedFull, res.RestartFull, res.RecoveredLive, res.Recovery, res.Accounting)
	for _, p := range res.Problems {
		t.Error(p)
	}
}
