package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

// ReservedKey is a key of another role, the admin key or the console's
// read-only key, that no tenant or worker of a tenant file may have.
// Name says which it is, in errors; the key itself is never shown.
type ReservedKey struct{ Name, Key string }

// OpenTenants loads the tenant config file at path, checking that every
// tenant's lane, and every lane a worker entry names, is in topo, and
// that no tenant or worker key is one of reserved (on every reload too).
// An empty path uses fallback, a config that cannot be reloaded.
func OpenTenants(path string, topo topology.Topology, fallback *tenant.Config, reserved ...ReservedKey) (*tenant.Live, error) {
	check := func(cfg *tenant.Config) error {
		// A tenant whose key was the admin key had the admin API, and one
		// whose key was the read-only key read every tenant's dead
		// letters in the console: the README says tenant keys are
		// refused there (found in a security review).
		for _, r := range reserved {
			if r.Key == "" {
				continue
			}
			if t, ok := cfg.Authenticate(r.Key); ok {
				return fmt.Errorf("tenant %q has %s among its keys: give it a key of its own (a tenant with it would have that role's rights)", t.ID, r.Name)
			}
			if w, ok := cfg.AuthenticateWorker(r.Key); ok {
				return fmt.Errorf("worker %q has %s among its keys: give it a key of its own", w.Name, r.Name)
			}
		}
		for _, t := range cfg.Tenants() {
			if _, ok := topo.Lane(t.Limits.Lane); !ok {
				return fmt.Errorf("tenant %q uses lane %q, which the queue topology does not define (lanes: %s)", t.ID, t.Limits.Lane, strings.Join(laneNames(topo), ", "))
			}
		}
		for _, w := range cfg.Workers() {
			for _, lane := range w.Lanes {
				if _, ok := topo.Lane(lane); !ok {
					return fmt.Errorf("worker %q may serve lane %q, which the queue topology does not define (lanes: %s)", w.Name, lane, strings.Join(laneNames(topo), ", "))
				}
			}
		}
		return nil
	}
	if path == "" {
		// The fallback is no file of the operator's (the gateway's
		// development tenant): say what to give instead.
		if err := check(fallback); err != nil {
			return nil, fmt.Errorf("%w; without --tenants the built-in tenants are used: give --tenants, a tenant file for these lanes", err)
		}
		return tenant.Fixed(fallback), nil
	}
	return tenant.NewLive(path, check)
}

func laneNames(topo topology.Topology) []string {
	names := make([]string, len(topo.Lanes))
	for i, l := range topo.Lanes {
		names[i] = l.Name
	}
	return names
}

// WatchTenants reloads live on each value from hup (the process's
// SIGHUPs, see NotifyHUP) and whenever its file changes, until ctx is
// done, logging and counting each reload. A refused file is logged with
// its error and the previous config stays in use.
func WatchTenants(ctx context.Context, live *tenant.Live, hup <-chan os.Signal, m *metrics.Metrics, log *slog.Logger) {
	report := reloadReporter(ctx, live, m, log)
	if v := live.Version(); v.Path != "" {
		log.InfoContext(ctx, "tenant config loaded", slog.String("path", v.Path), slog.String("sha256", v.Digest),
			slog.Int("tenants", v.Config.Len()), slog.Duration("load_time", v.LoadTime))
	}
	logNotices(ctx, log, live.Config())
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				changed, err := live.Reload()
				if errors.Is(err, tenant.ErrNotReloadable) {
					log.WarnContext(ctx, "SIGHUP ignored", slog.Any("error", err))
					continue
				}
				if !changed && err == nil {
					log.InfoContext(ctx, "SIGHUP: tenant config unchanged")
				}
				report(changed, err)
			}
		}
	}()
	go func() {
		if err := live.Watch(ctx, report); err != nil && !errors.Is(err, tenant.ErrNotReloadable) {
			log.ErrorContext(ctx, "tenant config file not watched; SIGHUP still reloads it", slog.Any("error", err))
		}
	}()
}

// reloadReporter returns the function that logs and counts each reload
// of live (tenant.Live.Watch's report).
func reloadReporter(ctx context.Context, live *tenant.Live, m *metrics.Metrics, log *slog.Logger) func(changed bool, err error) {
	return func(changed bool, err error) {
		switch {
		case errors.Is(err, tenant.ErrWatch):
			// No file was refused: the watcher failed (lost events, say)
			// and the file is read again.
			log.WarnContext(ctx, "tenant config watcher failed; the file is read again", slog.Any("error", err))
		case err != nil:
			m.TenantConfigReload(false)
			log.ErrorContext(ctx, "tenant config refused; the previous config stays in use", slog.Any("error", err))
		case changed:
			v := live.Version()
			m.TenantConfigReload(true)
			log.InfoContext(ctx, "tenant config reloaded", slog.String("path", v.Path), slog.String("sha256", v.Digest),
				slog.Int("tenants", v.Config.Len()), slog.Duration("load_time", v.LoadTime))
			logNotices(ctx, log, v.Config)
		}
	}
}

// NotifyHUP catches SIGHUP for the rest of the process's life, keeping
// one for WatchTenants to read as a reload: a binary that reloads on
// SIGHUP calls it first thing in main. Go's default action for SIGHUP
// ends the process, so one sent while the process started (opening its
// store, loading a large tenant file) or stopped, by a config-management
// tool after a deploy say, killed it when the handler came and went with
// the watcher (found in review).
func NotifyHUP() <-chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// logNotices logs the settings of cfg whose meaning changed in this
// version, so an operator upgrading sees what now behaves differently.
func logNotices(ctx context.Context, log *slog.Logger, cfg *tenant.Config) {
	for _, n := range cfg.Notices() {
		log.WarnContext(ctx, "tenant config: a setting's meaning changed", slog.String("notice", n))
	}
}
