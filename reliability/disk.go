package reliability

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// DiskResult is the outcome of the embedded backend's storage-fault runs.
type DiskResult struct {
	// Skipped says why the runs could not be made (mounting a small
	// filesystem needs root), empty when they ran.
	Skipped string `json:"skipped,omitempty"`

	// ReadOnlyExit is the gateway's exit status and error line when its
	// data directory is on a read-only filesystem.
	ReadOnlyExit  string `json:"read_only_exit"`
	ReadOnlyClear bool   `json:"read_only_clear"` // the error names the file and the cause

	// Disk full, while running.
	FSBytes      int64     `json:"fs_bytes"` // size of the small filesystem
	Load         LoadStats `json:"load"`
	FullError    string    `json:"full_error"` // a Submit error seen once the disk was full
	FullClear    bool      `json:"full_clear"`
	SurvivedFull bool      `json:"survived_full"` // the gateway kept running while full
	// RecoveredLive: the gateway that filled the disk took a Submit
	// again once space was freed, with no restart; Recovery is from
	// freeing the space to that first OK.
	RecoveredLive bool          `json:"recovered_live"`
	Recovery      time.Duration `json:"recovery"`
	// RestartFull says what a gateway restarted (after SIGKILL) with
	// drainers on the disk, full again, did; RestartRecovery is from
	// freeing space once more to its first OK (a restart included, if it
	// had exited).
	RestartFull     string        `json:"restart_full"`
	RestartRecovery time.Duration `json:"restart_recovery"`
	Accounting      Accounting    `json:"accounting"` // after a SIGKILL and a restart with drainers
	Problems        []string      `json:"problems"`
}

// RunDisk runs the embedded backend's storage faults on a small tmpfs
// mounted for the run: a read-only data directory at start, and a disk
// that fills up under load.
func RunDisk(ctx context.Context, env *Env, fsBytes int64) (*DiskResult, error) {
	res := &DiskResult{FSBytes: fsBytes}
	if os.Geteuid() != 0 {
		res.Skipped = "not root: mounting a small tmpfs needs CAP_SYS_ADMIN"
		return res, nil
	}
	mnt, err := env.Dir("disk-fs")
	if err != nil {
		return nil, err
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0750", fsBytes)); err != nil {
		res.Skipped = fmt.Sprintf("mount a %d-byte tmpfs: %v", fsBytes, err)
		return res, nil
	}
	defer func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) }()

	dataDir := filepath.Join(mnt, "data")
	c, err := newCluster(ctx, env, 0, testcluster.ClusterConfig{
		Name: "disk", Backend: testcluster.Embedded, DataDir: dataDir,
		Queues: fmt.Sprintf(crashQueuesYAML, "disk"), Tenants: crashTenantsYAML, Concurrency: 8, Args: drainFlags,
	})
	if err != nil {
		return nil, err
	}
	defer c.close()

	// 1. A data directory on a read-only filesystem: the gateway must
	// refuse to start, with an error naming the cause.
	if err := c.StartRole(ctx, "gateway"); err != nil {
		return nil, fmt.Errorf("first start: %w", err)
	}
	if err := c.Proc("gateway").Stop(30 * time.Second); err != nil {
		return nil, fmt.Errorf("stop after the first start: %w", err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		return nil, fmt.Errorf("remount read-only: %w", err)
	}
	p, err := c.Launch("gateway")
	if err != nil {
		return nil, err
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		p.Kill()
		res.Problems = append(res.Problems, "gateway on a read-only data directory did not exit within 30 s")
	}
	last := p.LastMsg()
	res.ReadOnlyExit = fmt.Sprintf("%v: %s", p.Err(), last)
	// The file is named once: the error used to repeat it ("open X: open
	// X: read-only file system").
	res.ReadOnlyClear = p.Err() != nil && strings.Contains(last, "read-only file system") && strings.Count(last, filepath.Join(dataDir, "queues.db")) == 1
	if !res.ReadOnlyClear {
		res.Problems = append(res.Problems, "read-only data directory: want a non-zero exit naming the file once and \"read-only file system\", got "+res.ReadOnlyExit)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", fsBytes)); err != nil {
		return nil, fmt.Errorf("remount read-write: %w", err)
	}

	// 2. The disk fills up under load, with nothing draining.
	if err := c.SetDraining(ctx, false); err != nil {
		return nil, err
	}
	ledger := &Ledger{}
	load, err := NewLoad(LoadConfig{
		Addr: c.Addr, Keys: crashKeys, Callers: 16, BatchShare: 0.5,
		PayloadSize: 8 << 10, CallTimeout: 30 * time.Second,
	}, ledger)
	if err != nil {
		return nil, err
	}
	defer load.Close()
	fill(ctx, load)
	res.Load = load.Stats()
	if l := c.Proc("gateway").Find("enqueue failed"); l != nil {
		res.FullError, _ = l["error"].(string)
	}
	res.FullClear = strings.Contains(res.FullError, "no space left on device") && strings.Contains(res.FullError, "unavailable")
	if res.Load.Count(codes.Unavailable) == 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("the %d-byte disk never filled: no UNAVAILABLE answer", fsBytes))
	} else if !res.FullClear {
		res.Problems = append(res.Problems, "disk full: want UNAVAILABLE naming \"no space left on device\", got "+res.FullError)
	}
	if res.SurvivedFull = !c.Proc("gateway").Exited(); !res.SurvivedFull {
		res.Problems = append(res.Problems, "the gateway exited on a full disk: "+c.Proc("gateway").Tail(3))
	}

	// 3. Space comes back: the same process must take Submits again, with
	// no restart (the operator freed space; nobody restarted anything).
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", 2*fsBytes)); err != nil {
		return nil, fmt.Errorf("grow the tmpfs: %w", err)
	}
	filled := c.Proc("gateway")
	if res.Recovery = probeFor(ctx, c, ledger, 30*time.Second); res.Recovery == 0 {
		res.Problems = append(res.Problems, "Submit still failed 30 s after space was freed, with the gateway that filled the disk running")
	}
	res.RecoveredLive = res.Recovery > 0 && c.Proc("gateway") == filled && !filled.Exited()
	if res.Recovery > 0 && !res.RecoveredLive {
		res.Problems = append(res.Problems, "the gateway that filled the disk exited before space was freed: "+filled.Tail(3))
	}

	// 4. Full again, then SIGKILL, and restart with drainers on the full
	// disk: it must either serve (deliveries whose deletes fail come back
	// later) or exit with a clear error.
	before := load.Stats().Count(codes.Unavailable)
	fill(ctx, load)
	if load.Stats().Count(codes.Unavailable) == before {
		res.Problems = append(res.Problems, "the grown disk never filled again: no UNAVAILABLE answer")
	}
	res.Load = load.Stats()
	for code, n := range res.Load.Codes {
		if !allowedUnderFaults[code] {
			res.Problems = append(res.Problems, fmt.Sprintf("Submit answered %s %d times on a full disk", code, n))
		}
	}
	c.Kill("gateway")
	if err := c.SetDraining(ctx, true); err != nil {
		res.RestartFull = "exited: " + c.Proc("gateway").LastMsg()
		if !strings.Contains(c.Proc("gateway").LastMsg(), "no space left on device") {
			res.Problems = append(res.Problems, "restart on a full disk failed without naming the cause: "+err.Error())
		}
	}
	full := c.Proc("gateway")
	if res.RestartFull == "" {
		sleepCtx(ctx, 5*time.Second)
		select {
		case <-full.Done():
			res.RestartFull = "served, then exited: " + full.LastMsg()
			res.Problems = append(res.Problems, "the draining gateway exited on a full disk: "+full.Tail(3))
		default:
			acked, _ := c.worker.Acked()
			res.RestartFull = fmt.Sprintf("serving; %d jobs delivered while full", len(acked))
		}
	}

	// 5. Space comes back again: Submit must work, after a restart only
	// if the gateway had exited.
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", 4*fsBytes)); err != nil {
		return nil, fmt.Errorf("grow the tmpfs: %w", err)
	}
	t0 := time.Now()
	select {
	case <-full.Done():
		if err := c.StartRole(ctx, "gateway"); err != nil {
			return nil, fmt.Errorf("restart once space is back: %w", err)
		}
	default:
	}
	if d := probeFor(ctx, c, ledger, 30*time.Second); d == 0 {
		res.Problems = append(res.Problems, "Submit still failed 30 s after space was freed, after the restart on the full disk")
	} else {
		res.RestartRecovery = time.Since(t0)
	}

	// 6. Every acknowledged job is delivered.
	c.drainAndStop(ctx, ledger, 2*time.Minute, &res.Problems)
	var left Leftovers
	if err := c.account(ctx, ledger, &res.Accounting, &left, &res.Problems); err != nil {
		return nil, err
	}
	return res, nil
}

// fill keeps load on until Submit is refused for a full disk (at most 2
// minutes), and 3 s longer.
func fill(ctx context.Context, load *Load) {
	before := load.Stats().Count(codes.Unavailable)
	stop := load.Start(ctx)
	deadline := time.Now().Add(2 * time.Minute)
	for load.Stats().Count(codes.Unavailable) == before && time.Now().Before(deadline) {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	sleepCtx(ctx, 3*time.Second)
	stop()
}

// probeFor submits a probe job every 100 ms until one is accepted and
// returns how long that took, or 0 if none was within limit.
func probeFor(ctx context.Context, c *cluster, ledger *Ledger, limit time.Duration) time.Duration {
	t0 := time.Now()
	for time.Since(t0) < limit && ctx.Err() == nil {
		if ledger.Probe(ctx, c.Addr, crashKeys[0], 100, 10*time.Second) == nil {
			return time.Since(t0)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return 0
}
