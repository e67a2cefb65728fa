package bench

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/topology"
)

// Tenant is one tenant of a scenario: its key and its limits (zero
// fields inherit the standard tier's).
type Tenant struct {
	ID          string
	Key         string
	SubmitRate  float64 // gateway admission, jobs/s
	SubmitBurst int
	DrainRate   float64 // the fair-rate mark: over it, served after the others
	DrainBurst  int
	MaxInFlight int     // hard ceiling on jobs in delivery; 0 = none
	Weight      float64 // share of worker time; 0 = the tier's
}

// NewTenants returns n tenants named prefix-0000… with random keys and
// the given limits.
func NewTenants(prefix string, n int, limits Tenant) []Tenant {
	ts := make([]Tenant, n)
	secret := make([]byte, 8)
	_, _ = rand.Read(secret)
	for i := range ts {
		t := limits
		t.ID = fmt.Sprintf("%s-%06d", prefix, i)
		t.Key = fmt.Sprintf("sk_bench_%x_%d", secret, i)
		ts[i] = t
	}
	return ts
}

// Open is a tenant that the gateway admits at any rate the harness can
// send and the drainers deliver without holding back.
var Open = Tenant{SubmitRate: 1e7, SubmitBurst: 1e7, DrainRate: 1e7, DrainBurst: 1e7, MaxInFlight: 100000}

// TenantsFile returns a tenant config file (tenant package format, keys
// stored as their SHA-256) for tenants, all in the standard tier.
func TenantsFile(tenants []Tenant) string {
	var b strings.Builder
	b.WriteString("tenants:\n")
	for _, t := range tenants {
		sum := sha256.Sum256([]byte(t.Key))
		fmt.Fprintf(&b, "  - id: %s\n    tier: standard\n    api_key_sha256: [%s]\n", t.ID, hex.EncodeToString(sum[:]))
		if t.SubmitRate != 0 {
			fmt.Fprintf(&b, "    submit_rate: %g\n", t.SubmitRate)
		}
		if t.DrainRate != 0 {
			fmt.Fprintf(&b, "    drain_rate: %g\n", t.DrainRate)
		}
		if t.Weight != 0 {
			fmt.Fprintf(&b, "    weight: %g\n", t.Weight)
		}
		for _, kv := range []struct {
			k string
			v int
		}{{"submit_burst", t.SubmitBurst}, {"drain_burst", t.DrainBurst}, {"max_in_flight", t.MaxInFlight}} {
			if kv.v != 0 {
				fmt.Fprintf(&b, "    %s: %d\n", kv.k, kv.v)
			}
		}
	}
	return b.String()
}

// Lane returns the one-lane topology ("standard") the scenarios use:
// sluice's own (shards shard queues, each tenant choosing the least deep
// of two) or, with fifo, one shard for everyone: no shuffle-sharding.
// The high-water mark is out of reach, so the gateway never refuses for
// depth; staleness is the bound beyond which sluice backlogs a job.
func Lane(prefix string, shards int, fifo bool, staleness topology.Duration) topology.Topology {
	l := topology.Lane{
		Name: "standard", Shards: shards, ShardChoices: 2, StalenessBound: staleness,
		Capacity: 1e6, HighWaterMark: 1 << 40,
	}
	if fifo {
		l.Shards, l.ShardChoices = 1, 1
	}
	return topology.Topology{Prefix: prefix, Lanes: []topology.Lane{l}}.WithDefaults()
}

// TopologyFile returns t as a --queues file.
func TopologyFile(t topology.Topology) (string, error) {
	b, err := yaml.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("write topology: %w", err)
	}
	return string(b), nil
}
