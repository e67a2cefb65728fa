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
	t.Logf("full: %v; error %q; survived %t; recovered live %t in %s; restart on the full disk: %s, took Submits %s after space was freed; %+v", res.Load.Codes, res.FullError, res.SurvivedFull, res.RecoveredLive, res.Recovery, res.RestartFull, res.RestartRecovery, res.Accounting)
	for _, p := range res.Problems {
		t.Error(p)
	}
}
