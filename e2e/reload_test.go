package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
	"github.com/sluice-dev/sluice/internal/testcluster"
)

// replaceFile writes content to path the way deploy tools do: a new file
// renamed over the old one.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const reloadBefore = `
tenants:
  - id: acme
    tier: standard
    api_keys: [acme-key-0001]
    submit_rate: 0.01
    submit_burst: 1
  - id: other
    tier: standard
    api_keys: [other-key-001]
    submit_rate: 0.01
    submit_burst: 1
  - id: busy
    tier: premium
    api_keys: [busy-key-0001]
`

// reloadAfter raises acme's limits and adds a second key; other is
// unchanged.
const reloadAfter = `
tenants:
  - id: acme
    tier: standard
    api_keys: [acme-key-0001, acme-key-0002]
    submit_rate: 500
    submit_burst: 50
  - id: other
    tier: standard
    api_keys: [other-key-001]
    submit_rate: 0.01
    submit_burst: 1
  - id: busy
    tier: premium
    api_keys: [busy-key-0001]
`

func TestTenantConfigReloadsLive(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, testcluster.ClusterConfig{
		Backend: testcluster.Embedded, Tenants: reloadBefore,
		// The shared topology's tiny standard high-water mark (5) would
		// refuse this test's few jobs until the depths are read again.
		Queues: strings.Replace(queuesYAML, "high_water_mark: 5", "high_water_mark: 1000", 1),
	})
	gw, tenantsPath := role(t, cl, "gateway"), filepath.Join(cl.Dir, "tenants.yaml")
	admin, adminKey := cl.AdminAddr, cl.AdminKey
	c := client(t, cl.Addr)
	submit := func(key string) error {
		_, err := c.Submit(withKey(t.Context(), key), &ingestv1.SubmitRequest{Payload: []byte("x")})
		return err
	}
	wantCode := func(err error, want codes.Code, what string) {
		t.Helper()
		if status.Code(err) != want {
			t.Fatalf("%s: %v, want %s", what, err, want)
		}
	}
	// Empty both limited tenants' buckets.
	for _, key := range []string{"acme-key-0001", "other-key-001"} {
		wantCode(submit(key), codes.OK, key+" first submit")
		wantCode(submit(key), codes.ResourceExhausted, key+" second submit")
	}

	// A tenant submitting throughout the reloads never sees an error other
	// than a quota refusal.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var unexpected []error
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := submit("busy-key-0001"); err != nil && status.Code(err) != codes.ResourceExhausted {
				unexpected = append(unexpected, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	// A file watch picks up the new file.
	replaceFile(t, tenantsPath, reloadAfter)
	line := gw.waitLogN("tenant config reloaded", 1)
	if line["tenants"] != float64(3) {
		t.Fatalf("reload log: %v", line)
	}
	wantCode(submit("acme-key-0001"), codes.OK, "acme after raising its limits")
	wantCode(submit("acme-key-0002"), codes.OK, "acme's new key")
	// other's bucket was not reset by the reload.
	wantCode(submit("other-key-001"), codes.ResourceExhausted, "other after the reload")

	out, err := cli(t, "limits", "--admin-addr", admin, "--admin-key", adminKey, "--json", "acme")
	if err != nil {
		t.Fatalf("drainer limits: %v\n%s", err, out)
	}
	var limits struct {
		Tier   string `json:"tier"`
		Limits struct {
			SubmitRate  float64 `json:"submitRate"`
			SubmitBurst int     `json:"submitBurst"`
		} `json:"limits"`
		Config struct {
			Path string `json:"path"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(out), &limits); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if limits.Tier != "standard" || limits.Limits.SubmitRate != 500 || limits.Limits.SubmitBurst != 50 || limits.Config.Path != tenantsPath {
		t.Fatalf("effective limits after reload: %s", out)
	}

	// A broken file is refused with its line, and the config in use stays.
	replaceFile(t, tenantsPath, strings.Replace(reloadAfter, "submit_rate: 500", "submit_rate: fast", 1))
	refused := gw.waitLogN("tenant config refused; the previous config stays in use", 1)
	if msg, _ := refused["error"].(string); !strings.Contains(msg, tenantsPath) || !strings.Contains(msg, "line 6") {
		t.Fatalf("refusal should name the file and line 6: %v", refused)
	}
	wantCode(submit("acme-key-0002"), codes.OK, "acme's key after a refused reload")

	// SIGHUP reloads too: revert to the first file's limits.
	if err := os.WriteFile(tenantsPath, []byte(reloadBefore), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = gw.Signal(syscall.SIGHUP)
	gw.waitLogN("tenant config reloaded", 2)
	wantCode(submit("acme-key-0002"), codes.Unauthenticated, "acme's removed key")

	close(stop)
	wg.Wait()
	if len(unexpected) > 0 {
		t.Fatalf("%d submits during the reloads failed unexpectedly, first: %v", len(unexpected), unexpected[0])
	}
	out, err = cli(t, "limits", "--admin-addr", admin, "--admin-key", adminKey, "nobody")
	if err == nil || !strings.Contains(out, "not in "+tenantsPath) {
		t.Fatalf("limits of an unknown tenant: err=%v\n%s", err, out)
	}
}
