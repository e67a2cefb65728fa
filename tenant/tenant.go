// Package tenant loads the tenant configuration: who may submit, with which
// API keys, in which tier, and with which limits. Tiers carry defaults;
// each tenant may override any limit. The file is YAML:
//
//	tiers:                      # optional: built-in premium, standard and free
//	  premium: {submit_rate: 2000, drain_rate: 1000}
//	tenants:
//	  - id: acme
//	    tier: premium
//	    api_key_sha256: [9f86d08…]   # hex SHA-256 of each key (preferred)
//	  - id: dev
//	    tier: standard
//	    api_keys: [dev-key]          # plain keys, for development only
//	    submit_rate: 50              # override the tier's limit
//	workers:                    # optional: pull workers' keys (workers.go)
//	  - name: pool
//	    api_key_sha256: [2c26b46…]
//	    lanes: [premium]             # empty: every lane
//
// Keys are looked up by their SHA-256, so a presented key is never compared
// byte by byte with a stored one and stored keys can stay hashed.
//
// A running process holds its config in a Live, which Live.Watch reloads
// when the file changes: it watches the file's directory and, for a file
// that is a symlink, the directories of the links' targets. If the file
// watcher stops, Watch reports it (an error wrapping ErrWatch) and polls
// the file every 5 seconds instead, so changes are still picked up.
package tenant

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/yamlerr"
)

// Limits are the per-tenant knobs. In a file, a field left out (or left
// empty) inherits the tier's value; a field written as 0 is 0, which for
// the optional ones (weight, min_share, max_drain_rate, max_drain_burst,
// max_in_flight) means none and for the others is refused.
type Limits struct {
	// Lane the tenant's jobs go to.
	Lane string `yaml:"lane"`
	// SubmitRate is the admitted jobs per second at the gateway (token
	// bucket refill rate).
	SubmitRate float64 `yaml:"submit_rate"`
	// SubmitBurst is the token bucket's size.
	SubmitBurst int `yaml:"submit_burst"`
	// HWMFraction is the share of the lane's high-water mark above which
	// this tenant's submits are refused (free 0.5, standard 0.8, premium 1).
	HWMFraction float64 `yaml:"hwm_fraction"`
	// DrainRate and DrainBurst mark the tenant's fair rate: jobs per
	// second (with a bucket of DrainBurst) delivered ahead of other
	// tenants' spare work. Past it the tenant is served after everyone
	// within theirs, with every slot they leave: never held back while
	// workers are free.
	DrainRate float64 `yaml:"drain_rate"`
	// DrainBurst is the fair-rate bucket's size.
	DrainBurst int `yaml:"drain_burst"`
	// Weight is the tenant's share of the workers' time relative to the
	// other tenants with work. Zero takes the lane's weight (topology).
	Weight float64 `yaml:"weight"`
	// MinShare is the fraction of the delivery slots guaranteed to the
	// tenant whenever it has work, in [0, 1). Zero: none.
	MinShare float64 `yaml:"min_share"`
	// MaxDrainRate is an optional hard ceiling, in jobs per second, on
	// the tenant's deliveries, for a downstream that needs one (its bucket
	// holds MaxDrainBurst, default the rate rounded up). Zero: none.
	MaxDrainRate  float64 `yaml:"max_drain_rate"`
	MaxDrainBurst int     `yaml:"max_drain_burst"`
	// MaxInFlight is an optional hard ceiling on the tenant's jobs being
	// delivered at once. Zero: none beyond the drainers' concurrency.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxPayloadBytes is the largest payload accepted.
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
}

// MaxPayloadBytesCeiling is the largest payload any tenant may configure.
// With up to 16 attributes and the envelope's own fields it stays inside the
// gateway's message limit (190 KiB of envelope: with the drainer's
// additions base64 expands it to at most SQS's 256 KiB).
const MaxPayloadBytesCeiling = 160 * 1024

// DefaultTiers are the built-in tiers. A file's tiers section overrides
// their fields and may add tiers.
func DefaultTiers() map[string]Limits {
	return map[string]Limits{
		"premium": {
			Lane: "premium", SubmitRate: 1000, SubmitBurst: 2000, HWMFraction: 1.0,
			DrainRate: 500, DrainBurst: 1000, MaxPayloadBytes: MaxPayloadBytesCeiling,
		},
		"standard": {
			Lane: "standard", SubmitRate: 200, SubmitBurst: 400, HWMFraction: 0.8,
			DrainRate: 100, DrainBurst: 200, MaxPayloadBytes: 64 * 1024,
		},
		"free": {
			Lane: "free", SubmitRate: 20, SubmitBurst: 40, HWMFraction: 0.5,
			DrainRate: 10, DrainBurst: 20, MaxPayloadBytes: 16 * 1024,
		},
	}
}

// limitSet is a set of Limits fields: those a file entry writes.
type limitSet uint16

const (
	setLane limitSet = 1 << iota
	setSubmitRate
	setSubmitBurst
	setHWMFraction
	setDrainRate
	setDrainBurst
	setWeight
	setMinShare
	setMaxDrainRate
	setMaxDrainBurst
	setMaxInFlight
	setMaxPayloadBytes
)

// limitBits maps each Limits field's YAML name to its bit.
var limitBits = map[string]limitSet{
	"lane": setLane, "submit_rate": setSubmitRate, "submit_burst": setSubmitBurst,
	"hwm_fraction": setHWMFraction, "drain_rate": setDrainRate, "drain_burst": setDrainBurst,
	"weight": setWeight, "min_share": setMinShare, "max_drain_rate": setMaxDrainRate,
	"max_drain_burst": setMaxDrainBurst, "max_in_flight": setMaxInFlight, "max_payload_bytes": setMaxPayloadBytes,
}

// writtenLimits returns the Limits fields a mapping gives a value (an
// empty or null value counts as left out).
func writtenLimits(node *yaml.Node) limitSet {
	var set limitSet
	if node.Kind != yaml.MappingNode {
		return set
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i+1].ShortTag() != "!!null" {
			set |= limitBits[node.Content[i].Value]
		}
	}
	return set
}

// inherit fills the fields of l that the file left out (not in written)
// from def. A field written as 0 stays 0: for max_in_flight, say, that
// lifts the tier's ceiling, and for submit_rate validate refuses it. Zero
// used to inherit too, so submit_rate: 0 gave a tenant its tier's rate
// and max_in_flight: 0 kept its tier's ceiling (found in review).
func (l Limits) inherit(def Limits, written limitSet) Limits {
	pick := func(bit limitSet, zero bool) bool { return zero && written&bit == 0 }
	if pick(setLane, l.Lane == "") {
		l.Lane = def.Lane
	}
	if pick(setSubmitRate, l.SubmitRate == 0) {
		l.SubmitRate = def.SubmitRate
	}
	if pick(setSubmitBurst, l.SubmitBurst == 0) {
		l.SubmitBurst = def.SubmitBurst
	}
	if pick(setHWMFraction, l.HWMFraction == 0) {
		l.HWMFraction = def.HWMFraction
	}
	if pick(setDrainRate, l.DrainRate == 0) {
		l.DrainRate = def.DrainRate
	}
	if pick(setDrainBurst, l.DrainBurst == 0) {
		l.DrainBurst = def.DrainBurst
	}
	if pick(setWeight, l.Weight == 0) {
		l.Weight = def.Weight
	}
	if pick(setMinShare, l.MinShare == 0) {
		l.MinShare = def.MinShare
	}
	if pick(setMaxDrainRate, l.MaxDrainRate == 0) {
		l.MaxDrainRate = def.MaxDrainRate
	}
	if pick(setMaxDrainBurst, l.MaxDrainBurst == 0) {
		l.MaxDrainBurst = def.MaxDrainBurst
	}
	if pick(setMaxInFlight, l.MaxInFlight == 0) {
		l.MaxInFlight = def.MaxInFlight
	}
	if pick(setMaxPayloadBytes, l.MaxPayloadBytes == 0) {
		l.MaxPayloadBytes = def.MaxPayloadBytes
	}
	return l
}

func (l Limits) validate() []string {
	var p []string
	if l.Lane == "" {
		p = append(p, "lane is empty")
	}
	// Written as !(x > 0) so that NaN (YAML's .nan) fails too.
	if !(l.SubmitRate > 0) || math.IsInf(l.SubmitRate, 0) {
		p = append(p, "submit_rate must be positive")
	}
	if l.SubmitBurst < 1 {
		p = append(p, "submit_burst must be at least 1")
	}
	if !(l.HWMFraction > 0 && l.HWMFraction <= 1) {
		p = append(p, "hwm_fraction must be in (0, 1]")
	}
	if !(l.DrainRate > 0) || math.IsInf(l.DrainRate, 0) {
		p = append(p, "drain_rate must be positive")
	}
	if l.DrainBurst < 1 {
		p = append(p, "drain_burst must be at least 1")
	}
	if !(l.Weight >= 0) || math.IsInf(l.Weight, 0) {
		p = append(p, "weight must not be negative (0 takes the lane's weight)")
	}
	if !(l.MinShare >= 0 && l.MinShare < 1) {
		p = append(p, "min_share must be in [0, 1)")
	}
	if !(l.MaxDrainRate >= 0) || math.IsInf(l.MaxDrainRate, 0) {
		p = append(p, "max_drain_rate must not be negative (0: no ceiling)")
	}
	if l.MaxDrainBurst < 0 {
		p = append(p, "max_drain_burst must not be negative")
	}
	if l.MaxInFlight < 0 {
		p = append(p, "max_in_flight must not be negative (0: no ceiling)")
	}
	if l.MaxPayloadBytes < 1 || l.MaxPayloadBytes > MaxPayloadBytesCeiling {
		p = append(p, fmt.Sprintf("max_payload_bytes must be 1 to %d", MaxPayloadBytesCeiling))
	}
	return p
}

// Tenant is one resolved tenant: its tier's limits with its overrides.
type Tenant struct {
	ID     string
	Tier   string
	Limits Limits
}

// tenantEntry is a tenant as written in the file.
type tenantEntry struct {
	ID           string   `yaml:"id"`
	Tier         string   `yaml:"tier"`
	APIKeys      []string `yaml:"api_keys"`
	APIKeySHA256 []string `yaml:"api_key_sha256"`
	Limits       `yaml:",inline"`

	line    int
	written limitSet // the Limits fields the entry writes
}

// tenantFields are the keys a tenant entry may have. yaml.v3 does not
// apply KnownFields inside a custom unmarshaler, so they are checked here.
var tenantFields = yamlFields(reflect.TypeFor[tenantEntry]())

func yamlFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for _, k := range yamlerr.Keys(t, nil) {
		out[k] = true
	}
	return out
}

// checkFields refuses a mapping with a key not in fields; what names the
// entry for the error.
func checkFields(node *yaml.Node, fields map[string]bool, what string) error {
	if node.Kind == yaml.MappingNode {
		for i := 0; i < len(node.Content); i += 2 {
			if k := node.Content[i]; !fields[k.Value] {
				return fmt.Errorf("line %d: unknown %s field %q", k.Line, what, k.Value)
			}
		}
	}
	return nil
}

func (e *tenantEntry) UnmarshalYAML(node *yaml.Node) error {
	if err := checkFields(node, tenantFields, "tenant"); err != nil {
		return err
	}
	type plain tenantEntry
	var p plain
	if err := node.Decode(&p); err != nil {
		return err
	}
	*e = tenantEntry(p)
	e.line = node.Line
	e.written = writtenLimits(node)
	return nil
}

// tierEntry is a tier's limits as written in the file, with the line
// they start on, for errors.
type tierEntry struct {
	Limits `yaml:",inline"`

	line    int
	written limitSet
}

var limitFields = yamlFields(reflect.TypeFor[Limits]())

func (e *tierEntry) UnmarshalYAML(node *yaml.Node) error {
	if err := checkFields(node, limitFields, "tier"); err != nil {
		return err
	}
	if err := node.Decode(&e.Limits); err != nil {
		return err
	}
	e.line = node.Line
	e.written = writtenLimits(node)
	return nil
}

type file struct {
	Tiers   map[string]tierEntry `yaml:"tiers"`
	Tenants []tenantEntry        `yaml:"tenants"`
	Workers []workerEntry        `yaml:"workers"`
}

// Config is a loaded, validated tenant configuration. It is immutable;
// reloading builds a new one.
//
// It is laid out for files of many tenants: the tenants sit in one slice
// (no allocation each), tier and lane names are shared, keys are kept as
// fixed-size hashes, and the maps are sized once. With 100,000 tenants
// it holds about 200 bytes per tenant (BenchmarkParseLarge).
type Config struct {
	tiers   map[string]Limits
	all     []Tenant
	tenants map[string]*Tenant
	byKey   map[[sha256.Size]byte]*Tenant
	notices []string
	// workers are the pull workers' credentials (workers.go).
	workers    map[[sha256.Size]byte]*Worker
	workerList []*Worker
}

// Notices are lines to log when the config is loaded: settings whose
// meaning changed in this version of sluice.
func (c *Config) Notices() []string { return c.notices }

// meaningChanged notes, once per field, where a file sets a limit whose
// meaning changed.
func (c *Config) meaningChanged(line int, l Limits, seen map[string]bool) {
	note := func(field, text string) {
		if !seen[field] {
			seen[field] = true
			c.notices = append(c.notices, fmt.Sprintf("line %d: %s %s", line, field, text))
		}
	}
	if l.DrainRate != 0 || l.DrainBurst != 0 {
		note("drain_rate", "now marks the tenant's fair rate: past it the tenant is served after the others, "+
			"but never held back while workers are free (it used to throttle); set max_drain_rate for a hard ceiling")
	}
	if l.MaxInFlight != 0 {
		note("max_in_flight", "is a hard ceiling that holds the tenant's jobs back even while workers are free; "+
			"the built-in tiers no longer set one")
	}
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidID reports whether id is a well-formed tenant id: 1-64 letters,
// digits, '.', '_' or '-', starting with a letter or digit.
func ValidID(id string) bool { return idRE.MatchString(id) }

// Load reads and validates a tenant config file. Errors name the file and
// the line of the offending entry.
func Load(path string) (*Config, error) {
	c, _, err := loadFile(path, "")
	if err != nil {
		return nil, fmt.Errorf("tenant config %s: %w", path, err)
	}
	return c, nil
}

// loadFile parses the file at path (see parseFrom), returning a nil
// config if its digest is unchanged.
func loadFile(path, unchanged string) (*Config, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("read tenant config: %w", err)
	}
	defer f.Close()
	return parseFrom(f, unchanged)
}

// Parse decodes and validates a tenant config. Unknown fields are errors.
//
// A file laid out the usual way (a block list under a top-level
// "tenants:" key) is decoded a few hundred tenants at a time, the plainest
// entries by hand, so parsing a large file allocates little more than the
// config it builds (see parseFrom and fastEntries); any other layout, and
// any file the chunks do not decode cleanly, is decoded whole, which gives
// the same config or the error. Load and reloads read a file in pieces
// and never hold it whole.
func Parse(data []byte) (*Config, error) {
	c, _, err := parseFrom(bytes.NewReader(data), "")
	return c, err
}

// parseWhole decodes the whole document at once.
func parseWhole(data []byte) (*Config, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); errors.Is(err, io.EOF) {
		// No document: an empty file, or one of only comments. A bare
		// "EOF" said nothing (found in review); such a file is refused,
		// as it most likely is one half written, and would lock every
		// tenant out.
		return nil, errors.New("the file is empty (no tenants:, tiers: or workers:); for no tenants at all write tenants: []")
	} else if err != nil {
		return nil, err
	}
	// Only the first document was read: the tenants after a "---" were
	// dropped without a word (found in review).
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return nil, fmt.Errorf("line %d: a second YAML document (after ---): put every tier, tenant and worker in one", line)
	}
	b := newBuilder(f.Tiers, len(f.Tenants))
	for i := range f.Tenants {
		b.add(&f.Tenants[i])
	}
	b.addWorkers(f.Workers)
	return b.done()
}

// builder builds a Config from tiers and then one tenant entry at a time.
type builder struct {
	c     *Config
	names map[string]string // tier and lane names, one copy each
	errs  []error
	seen  map[string]bool // fields already noted by meaningChanged
}

func newBuilder(tiers map[string]tierEntry, tenants int) *builder {
	b := &builder{
		c: &Config{
			tiers:   DefaultTiers(),
			all:     make([]Tenant, 0, tenants),
			tenants: make(map[string]*Tenant, tenants),
			byKey:   make(map[[sha256.Size]byte]*Tenant, tenants),
		},
		names: map[string]string{},
		seen:  map[string]bool{},
	}
	for _, name := range slices.Sorted(maps.Keys(tiers)) {
		e := tiers[name]
		b.c.meaningChanged(e.line, e.Limits, b.seen)
		l := e.Limits.inherit(b.c.tiers[name], e.written)
		for _, p := range l.validate() {
			b.errs = append(b.errs, fmt.Errorf("line %d: tier %s: %s", e.line, name, p))
		}
		b.c.tiers[name] = l
	}
	for name, l := range b.c.tiers {
		b.names[name] = name
		l.Lane = b.intern(l.Lane)
		b.c.tiers[name] = l
	}
	return b
}

func (b *builder) intern(s string) string {
	if v, ok := b.names[s]; ok {
		return v
	}
	b.names[s] = s
	return s
}

// add checks one tenant entry and adds it. The tenants slice was sized
// for every entry, so pointers into it stay valid.
func (b *builder) add(e *tenantEntry) {
	c := b.c
	fail := func(format string, args ...any) {
		b.errs = append(b.errs, fmt.Errorf("line %d: tenant %q: %s", e.line, e.ID, fmt.Sprintf(format, args...)))
	}
	if !idRE.MatchString(e.ID) {
		fail("id must be 1-64 letters, digits, '.', '_' or '-'")
	}
	if c.tenants[e.ID] != nil {
		fail("duplicate tenant id")
	}
	// Without a tier the limits have nothing to inherit: checking them
	// as well added "lane is empty", "submit_rate must be positive" and
	// more, which sent operators to write those instead of the tier.
	def, ok := c.tiers[e.Tier]
	switch {
	case e.Tier == "":
		fail("no tier: write tier: one of %v", slices.Sorted(maps.Keys(c.tiers)))
	case !ok:
		fail("unknown tier %q (known: %v)", e.Tier, slices.Sorted(maps.Keys(c.tiers)))
	}
	c.meaningChanged(e.line, e.Limits, b.seen)
	limits := e.Limits.inherit(def, e.written)
	limits.Lane = b.intern(limits.Lane)
	if ok {
		for _, p := range limits.validate() {
			fail("%s", p)
		}
	}
	if len(e.APIKeys)+len(e.APIKeySHA256) == 0 {
		fail("no api_keys or api_key_sha256")
	}
	if len(c.all) == cap(c.all) {
		// More entries than sized for would move the slice under the
		// maps' pointers: count them as errors instead (never happens).
		fail("more tenants than counted")
		return
	}
	c.all = append(c.all, Tenant{ID: e.ID, Tier: b.intern(e.Tier), Limits: limits})
	t := &c.all[len(c.all)-1]
	for _, k := range e.APIKeys {
		if msg := keyProblem(k); msg != "" {
			fail("%s", msg)
			continue
		}
		b.addKey(t, sha256.Sum256([]byte(k)), fail)
	}
	for i, h := range e.APIKeySHA256 {
		var sum [sha256.Size]byte
		if len(h) != 2*sha256.Size || hexDecode(sum[:], h) != nil {
			// Never echo the value: it may be a plain key put here by
			// mistake, and errors end up in logs.
			fail("api_key_sha256[%d] is not 64 hex digits (a plain key belongs under api_keys)", i)
			continue
		}
		b.addKey(t, sum, fail)
	}
	c.tenants[t.ID] = t
}

// hexDecode decodes the hex digits of s into dst, which is exactly
// large enough.
func hexDecode(dst []byte, s string) error {
	_, err := hex.Decode(dst, []byte(s))
	return err
}

func (b *builder) addKey(t *Tenant, sum [sha256.Size]byte, fail func(string, ...any)) {
	if other := b.c.byKey[sum]; other != nil && other.ID != t.ID {
		fail("api key already belongs to tenant %q", other.ID)
	}
	b.c.byKey[sum] = t
}

func (b *builder) done() (*Config, error) {
	if err := errors.Join(b.errs...); err != nil {
		return nil, err
	}
	return b.c, nil
}

// Authenticate returns the tenant owning key.
func (c *Config) Authenticate(key string) (*Tenant, bool) {
	t, ok := c.byKey[sha256.Sum256([]byte(key))]
	return t, ok
}

// Tenant returns the tenant with the given id.
func (c *Config) Tenant(id string) (*Tenant, bool) {
	t, ok := c.tenants[id]
	return t, ok
}

// Tenants returns every tenant, sorted by id.
func (c *Config) Tenants() []*Tenant {
	out := slices.Collect(maps.Values(c.tenants))
	slices.SortFunc(out, func(a, b *Tenant) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Len returns the number of tenants.
func (c *Config) Len() int { return len(c.all) }

// Tier returns a tier's limits.
func (c *Config) Tier(name string) (Limits, bool) {
	l, ok := c.tiers[name]
	return l, ok
}

// Lanes returns the lanes that tiers and tenants refer to, sorted.
func (c *Config) Lanes() []string {
	set := map[string]bool{}
	for _, t := range c.tenants {
		set[t.Limits.Lane] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// keyProblem says what is wrong with a plain key of a tenant file, or "".
// A key with white space was taken, and could never be used: a caller's
// bearer token is trimmed, and the Go client refuses white space (found
// in a review). The key itself is never part of the answer.
func keyProblem(k string) string {
	switch {
	case len(k) < MinKeyLen:
		return fmt.Sprintf("api key shorter than %d characters", MinKeyLen)
	case strings.ContainsFunc(k, unicode.IsSpace):
		return "api key with white space in it (it could never be sent): remove the spaces, tabs or newlines"
	}
	return ""
}

// MinKeyLen is the fewest characters an API key may have: tenant and
// worker keys in the file, and the processes' admin key (node.AdminKey).
const MinKeyLen = 8

// HashKey returns the hex SHA-256 of an API key, the form api_key_sha256 takes.
func HashKey(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}
