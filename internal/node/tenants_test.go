package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/metrics"
	"github.com/sluice-dev/sluice/metrics/metricstest"
	"github.com/sluice-dev/sluice/tenant"
	"github.com/sluice-dev/sluice/topology"
)

// TestOpenTenantsRefusesUnknownWorkerLane: a workers entry whose lanes
// name a lane the queue topology does not define is refused at start and
// on reload, naming the worker and the lane, as a tenant's unknown lane
// is. It loaded, and the pool it was meant for never got that lane's jobs
// (a typo such as "standrd" left the lane undrained by those workers).
func TestOpenTenantsRefusesUnknownWorkerLane(t *testing.T) {
	t.Parallel()
	const tenants = "tenants:\n  - {id: acme, tier: standard, api_keys: [acme-key-1]}\n"
	tests := []struct {
		name, workers, want string
	}{
		{"typo", "workers:\n  - {name: pool, api_keys: [worker-key-1], lanes: [premium, standrd]}\n", `worker "pool" may serve lane "standrd"`},
		{"known lanes", "workers:\n  - {name: pool, api_keys: [worker-key-1], lanes: [premium, standard]}\n", ""},
		{"every lane", "workers:\n  - {name: pool, api_keys: [worker-key-1]}\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "tenants.yaml")
			write := func(s string) {
				if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			write(tenants + tt.workers)
			_, err := OpenTenants(path, topology.Default(), nil)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("OpenTenants: %v, want it loaded", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("OpenTenants: %v, want an error containing %q", err, tt.want)
			}
			// On reload too: the good config stays.
			write(tenants)
			live, err := OpenTenants(path, topology.Default(), nil)
			if err != nil {
				t.Fatal(err)
			}
			write(tenants + tt.workers)
			if changed, err := live.Reload(); changed || err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Reload: changed %v, %v; want it refused with %q", changed, err, tt.want)
			}
			if n := len(live.Config().Workers()); n != 0 {
				t.Fatalf("after the refused reload %d workers, want the old config's 0", n)
			}
		})
	}
}

// TestOpenTenantsFallbackOutsideTheTopology: without --tenants, a
// fallback tenant in a lane the queue topology lacks (the gateway's
// development tenant, standard tier, beside --queues of other lanes) is
// refused naming --tenants and the lanes there are. The error spoke only
// of a tenant "dev" that no file of the operator's defines.
func TestOpenTenantsFallbackOutsideTheTopology(t *testing.T) {
	t.Parallel()
	topo, err := topology.Parse([]byte("lanes:\n  - name: gold\n  - name: silver\n"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := tenant.Parse([]byte("tenants:\n  - {id: dev, tier: standard, api_keys: [dev-key-12345]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = OpenTenants("", topo, dev)
	for _, want := range []string{`tenant "dev" uses lane "standard"`, "--tenants", "gold, silver"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenTenants: %v, want an error containing %q", err, want)
		}
	}
}

// TestWatcherErrorIsNoRefusedReload: a failure of the tenant file's
// watcher (tenant.ErrWatch, events lost to a queue overflow), after which
// the file is read again, is logged as what it is and not counted as a
// refused reload. It was logged "tenant config refused; the previous
// config stays in use" and counted in
// sluice_tenant_config_reloads_total{result="refused"}, which the
// operations guide reads as a bad file shipped.
func TestWatcherErrorIsNoRefusedReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(path, []byte("tenants:\n  - {id: acme, tier: standard, api_keys: [acme-key-1]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := OpenTenants(path, topology.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	var logged strings.Builder
	report := reloadReporter(t.Context(), live, metrics.New(reg, metrics.Options{}), slog.New(slog.NewTextHandler(&logged, nil)))
	refused := func() float64 {
		return metricstest.CounterSum(t, reg, metrics.NameTenantReloads, map[string]string{"result": "refused"})
	}
	report(false, fmt.Errorf("%w: %w", tenant.ErrWatch, errors.New("fsnotify: queue or buffer overflow")))
	if n := refused(); n != 0 || strings.Contains(logged.String(), "refused") || !strings.Contains(logged.String(), "queue or buffer overflow") {
		t.Errorf("watcher error: %g refused reloads counted, log %q; want none, and the error logged", n, logged.String())
	}
	report(false, errors.New("tenant config: line 3: unknown tier"))
	if n := refused(); n != 1 {
		t.Errorf("refused file: %g refused reloads counted, want 1", n)
	}
}

// TestTenantFileMayNotHoldReservedKeys: a tenant or worker of the tenant
// file whose key is the admin key or the console's read-only key is
// refused, at start and on reload (the previous config stays), naming
// who has which and never the key. Such a tenant had the admin API, or
// read every tenant's dead letters (found in a security review).
func TestTenantFileMayNotHoldReservedKeys(t *testing.T) {
	t.Parallel()
	reserved := []ReservedKey{{Name: "the admin key", Key: "admin-key-1234"}, {Name: "the console's read-only key", Key: "readonly-key-99"}}
	tests := []struct {
		name, file, want string
	}{
		{"tenant with the admin key", "tenants:\n  - {id: carol, tier: standard, api_keys: [admin-key-1234]}\n", `tenant "carol" has the admin key among its keys`},
		{"tenant with the read-only key", "tenants:\n  - {id: erin, tier: standard, api_keys: [erin-key-1, readonly-key-99]}\n", `tenant "erin" has the console's read-only key among its keys`},
		{"worker with the admin key", "tenants:\n  - {id: acme, tier: standard, api_keys: [acme-key-1]}\nworkers:\n  - {name: pool, api_keys: [admin-key-1234]}\n", `worker "pool" has the admin key among its keys`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "tenants.yaml")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenTenants(path, topology.Default(), nil, reserved...)
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "admin-key-1234") || strings.Contains(err.Error(), "readonly-key-99") {
				t.Fatalf("OpenTenants: %v, want an error saying %s and naming no key", err, tt.want)
			}
		})
	}
	t.Run("on reload", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "tenants.yaml")
		acmeOnly, _, _ := strings.Cut(tests[2].file, "workers:")
		if err := os.WriteFile(path, []byte(acmeOnly), 0o600); err != nil {
			t.Fatal(err)
		}
		live, err := OpenTenants(path, topology.Default(), nil, reserved...)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(tests[0].file), 0o600); err != nil {
			t.Fatal(err)
		}
		if changed, err := live.Reload(); changed || err == nil || !strings.Contains(err.Error(), tests[0].want) {
			t.Fatalf("reload: changed %v, %v; want it refused saying %s", changed, err, tests[0].want)
		}
		if _, ok := live.Config().Authenticate("admin-key-1234"); ok {
			t.Fatal("the refused file's tenant with the admin key authenticates")
		}
	})
}
