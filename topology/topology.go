// Package topology describes sluice's queues: the lanes (service tiers),
// each with N shard queues, a spillover queue, a backlog queue and a
// dead-letter queue, and the one naming rule that the Go code and the
// Terraform module share.
//
// Queue names are <prefix>-<lane>-<kind>, where kind is shard-NN (two or
// more digits, zero-based), spillover, backlog or dlq. For example, with
// prefix "sluice" and lane "premium": sluice-premium-shard-00,
// sluice-premium-spillover, sluice-premium-backlog, sluice-premium-dlq.
// Every queue of a lane redrives to the lane's dead-letter queue.
package topology

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/yamlerr"
	"github.com/sluice-dev/sluice/queue"
)

// Kind is the role of a queue within its lane.
type Kind string

// Queue kinds.
const (
	KindShard     Kind = "shard"
	KindSpillover Kind = "spillover"
	KindBacklog   Kind = "backlog"
	KindDLQ       Kind = "dlq"
)

// Defaults for Lane and Topology fields left zero.
const (
	PrefixDefault            = "sluice"
	ShardsDefault            = 4
	MaxShards                = 1000 // shard queues in a lane, at most
	ShardChoicesDefault      = 2
	WeightDefault            = 1
	VisibilityTimeoutDefault = 30 * time.Second
	RetentionDefault         = 4 * 24 * time.Hour
	StalenessBoundDefault    = 5 * time.Minute
	CapacityDefault          = 1000 // jobs per second, for the whole lane
	SLADefault               = 5 * time.Minute
	MaxReceiveCountDefault   = 5
)

// Duration is a time.Duration that reads and writes as "30s" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string such as "90s" or "5m".
func (d *Duration) UnmarshalYAML(node *yaml.Node) error {
	var s string
	if err := node.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as \"30s\"", node.Line)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", node.Line, err)
	}
	*d = Duration(v)
	return nil
}

// String is the duration as a Go duration string, such as "30s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Lane is one service class and its queues.
type Lane struct {
	// Name of the lane: lowercase letters, digits and hyphens, e.g. "premium".
	Name string `yaml:"name"`
	// Shards is the number of shard queues (N). Defaults to 4.
	Shards int `yaml:"shards"`
	// RetiredShards is how many shard queues past Shards still hold jobs
	// (the lane had more shards before): the drainers read them and the
	// high-water mark counts them, but no new job goes to them. Not read
	// from the file: WithRetiredShards finds them in the backend.
	RetiredShards int `yaml:"-"`
	// ShardChoices is how many of the N shards each tenant hashes to (k).
	// Defaults to 2, clamped to Shards.
	ShardChoices int `yaml:"shard_choices"`
	// Weight is the lane's share of drain capacity relative to other lanes.
	// Defaults to 1.
	Weight int `yaml:"weight"`
	// VisibilityTimeout is how long a received job stays hidden before it is
	// redelivered; heartbeats extend it. Defaults to 30s.
	VisibilityTimeout Duration `yaml:"visibility_timeout"`
	// Retention is how long the queues keep a message. Defaults to 4 days.
	Retention Duration `yaml:"retention"`
	// StalenessBound is the age beyond which a job read from a shard is moved
	// to the backlog queue so fresh jobs go first. Defaults to 5m.
	StalenessBound Duration `yaml:"staleness_bound"`
	// Capacity is the jobs per second the lane's drainers and workers are
	// provisioned to deliver, for the whole lane. It sizes the high-water
	// mark, and the retry hint of a backlog refusal while no measured
	// drain rate is known. Defaults to 1000. (Not a tenant's drain_rate,
	// which limits one tenant's deliveries: see tenant.Limits.)
	Capacity float64 `yaml:"capacity"`
	// DeprecatedDrainRate is the old name of Capacity, still read from
	// "drain_rate" (WithDefaults moves it to Capacity and notes it in
	// Deprecations); giving both is an error.
	DeprecatedDrainRate float64 `yaml:"drain_rate,omitempty"`
	// SLA is the longest acceptable wait in the lane. Defaults to 5m.
	SLA Duration `yaml:"sla"`
	// HighWaterMark is the lane backlog (messages waiting in all its queues)
	// above which Submit is refused for every tier. Defaults to
	// Capacity × SLA.
	HighWaterMark int64 `yaml:"high_water_mark"`
}

// Topology is the full queue layout; it is also the file format that
// `--queues` reads and that the Terraform module outputs.
type Topology struct {
	// Prefix starts every queue name. Defaults to "sluice".
	Prefix string `yaml:"prefix"`
	// MaxReceiveCount is the number of receives after which a message goes
	// to its lane's dead-letter queue. Defaults to 5.
	MaxReceiveCount int `yaml:"max_receive_count"`
	// Lanes in priority order (informational; draining uses weights).
	Lanes []Lane `yaml:"lanes"`
	// QueueURLs maps queue names to their SQS URLs, as the Terraform module
	// outputs them. Optional: names missing here are looked up by name.
	QueueURLs map[string]string `yaml:"queue_urls"`
	// Deprecations lists the deprecated keys the file used, as sentences to
	// log at start (LoadTopology does).
	Deprecations []string `yaml:"-"`
}

// Default returns the topology used when no queue config is given: three
// lanes, premium, standard and free, weighted 6:3:1.
func Default() Topology {
	t := Topology{Lanes: []Lane{
		{Name: "premium", Weight: 6},
		{Name: "standard", Weight: 3},
		{Name: "free", Weight: 1},
	}}
	return t.WithDefaults()
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// maxQueueNameLen is Amazon SQS's limit on queue names.
const maxQueueNameLen = 80

// MaxWeight bounds a lane's weight, so the drainers' weighted round-robin
// sums of weights cannot overflow.
const MaxWeight = 1000

// WithDefaults returns a copy with zero fields set to their defaults.
func (t Topology) WithDefaults() Topology {
	if t.Prefix == "" {
		t.Prefix = PrefixDefault
	}
	if t.MaxReceiveCount == 0 {
		t.MaxReceiveCount = MaxReceiveCountDefault
	}
	lanes := make([]Lane, len(t.Lanes))
	for i, l := range t.Lanes {
		if l.DeprecatedDrainRate != 0 && l.Capacity == 0 {
			l.Capacity, l.DeprecatedDrainRate = l.DeprecatedDrainRate, 0
			t.Deprecations = append(t.Deprecations, fmt.Sprintf("lane %s: drain_rate is deprecated: rename it to capacity (the lane's deliveries per second; a tenant's drain_rate is another thing)", l.Name))
		}
		lanes[i] = l.withDefaults()
	}
	t.Lanes = lanes
	return t
}

func (l Lane) withDefaults() Lane {
	setDefault(&l.Shards, ShardsDefault)
	setDefault(&l.ShardChoices, ShardChoicesDefault)
	l.ShardChoices = min(l.ShardChoices, l.Shards)
	setDefault(&l.Weight, WeightDefault)
	setDefault(&l.VisibilityTimeout, Duration(VisibilityTimeoutDefault))
	setDefault(&l.Retention, Duration(RetentionDefault))
	setDefault(&l.StalenessBound, Duration(StalenessBoundDefault))
	setDefault(&l.Capacity, CapacityDefault)
	setDefault(&l.SLA, Duration(SLADefault))
	if l.HighWaterMark == 0 {
		l.HighWaterMark = l.derivedHighWaterMark()
	}
	return l
}

// derivedHighWaterMark is capacity × sla in jobs, the high-water mark of
// a lane that gives none; at most math.MaxInt64.
func (l Lane) derivedHighWaterMark() int64 {
	jobs := l.Capacity * time.Duration(l.SLA).Seconds()
	if jobs >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(jobs)
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports every problem with t, one per line.
func (t Topology) Validate() error {
	var errs []error
	if !nameRE.MatchString(t.Prefix) {
		errs = append(errs, fmt.Errorf("prefix %q: use lowercase letters, digits and hyphens", t.Prefix))
	}
	if t.MaxReceiveCount < 1 || t.MaxReceiveCount > 1000 {
		errs = append(errs, fmt.Errorf("max_receive_count %d: must be 1 to 1000", t.MaxReceiveCount))
	}
	if len(t.Lanes) == 0 {
		errs = append(errs, errors.New("lanes: at least one lane is required"))
	}
	seen := map[string]bool{}
	for i, l := range t.Lanes {
		at := fmt.Sprintf("lanes[%d] (%s)", i, l.Name)
		if !nameRE.MatchString(l.Name) {
			errs = append(errs, fmt.Errorf("%s: name must be lowercase letters, digits and hyphens", at))
		}
		if seen[l.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate lane name", at))
		}
		seen[l.Name] = true
		if l.Shards < 1 || l.Shards > MaxShards {
			errs = append(errs, fmt.Errorf("%s: shards %d must be 1 to %d", at, l.Shards, MaxShards))
		}
		if l.ShardChoices < 1 {
			errs = append(errs, fmt.Errorf("%s: shard_choices %d must be at least 1", at, l.ShardChoices))
		}
		if l.Weight < 1 || l.Weight > MaxWeight {
			errs = append(errs, fmt.Errorf("%s: weight %d must be 1 to %d", at, l.Weight, MaxWeight))
		}
		if v := time.Duration(l.VisibilityTimeout); v < time.Second || v > queue.MaxVisibilityTimeout {
			errs = append(errs, fmt.Errorf("%s: visibility_timeout %s must be 1s to 12h", at, v))
		}
		if r := time.Duration(l.Retention); r < time.Minute || r > 14*24*time.Hour {
			errs = append(errs, fmt.Errorf("%s: retention %s must be 1m to 336h (14 days)", at, r))
		}
		if l.StalenessBound < 0 {
			errs = append(errs, fmt.Errorf("%s: staleness_bound must not be negative", at))
		}
		if !(l.Capacity > 0) || math.IsInf(l.Capacity, 0) { // NaN (YAML's .nan) fails too
			errs = append(errs, fmt.Errorf("%s: capacity must be positive", at))
		}
		if l.SLA <= 0 {
			errs = append(errs, fmt.Errorf("%s: sla %s must be positive", at, time.Duration(l.SLA)))
		}
		if l.DeprecatedDrainRate != 0 {
			errs = append(errs, fmt.Errorf("%s: give capacity only (drain_rate is its deprecated name)", at))
		}
		switch {
		case l.HighWaterMark >= 1:
		case l.Capacity > 0 && l.SLA > 0 && l.HighWaterMark == l.derivedHighWaterMark():
			errs = append(errs, fmt.Errorf("%s: capacity %g × sla %s gives a high-water mark under one job: set high_water_mark, or a larger capacity or sla",
				at, l.Capacity, time.Duration(l.SLA)))
		default:
			errs = append(errs, fmt.Errorf("%s: high_water_mark must be positive", at))
		}
		if n := len(QueueName(t.Prefix, l.Name, KindSpillover, 0)); n > maxQueueNameLen {
			errs = append(errs, fmt.Errorf("%s: queue names would be %d characters, over the limit of %d", at, n, maxQueueNameLen))
		}
	}
	if len(t.QueueURLs) > 0 {
		known := map[string]bool{}
		for _, q := range t.Queues() {
			known[q.Spec.Name] = true
		}
		for name, url := range t.QueueURLs {
			if !known[name] {
				errs = append(errs, fmt.Errorf("queue_urls: %q is not a queue of this topology", name))
			}
			if !strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://") {
				errs = append(errs, fmt.Errorf("queue_urls: %s: %q is not an http(s) URL", name, url))
			}
		}
	}
	return errors.Join(errs...)
}

// Load reads a topology file (YAML), applies defaults and validates it.
// Errors name the file and line.
func Load(path string) (Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Topology{}, fmt.Errorf("read queue config: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return Topology{}, fmt.Errorf("queue config %s: %w", path, err)
	}
	return t, nil
}

// Parse decodes a topology from YAML, applies defaults and validates it.
// Unknown fields are errors, and so is a zero written for a field whose
// zero means its default (a key left out or null takes the default).
func Parse(data []byte) (Topology, error) {
	var t Topology
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&t); errors.Is(err, io.EOF) {
		// A bare "EOF" said nothing (found in review).
		return Topology{}, errors.New("the file is empty: give at least lanes: (see the Terraform module's queue config output)")
	} else if err != nil {
		return Topology{}, knownFields(yamlerr.Locate(data, err))
	}
	// Only the first document was read: the lanes after a "---" were
	// dropped without a word (found in review).
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return Topology{}, err
		}
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		return Topology{}, fmt.Errorf("line %d: a second YAML document (after ---): put every setting and lane in one", line)
	}
	if err := checkGiven(data); err != nil {
		return Topology{}, err
	}
	t = t.WithDefaults()
	if err := t.Validate(); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// unknownField matches yaml.v3's error for a key that no field takes.
var unknownField = regexp.MustCompile(`field (\S+) not found in type topology\.(Topology|Lane)$`)

// sectionKeys lists, for each type a queue file decodes into, what it is
// called and the keys it takes (deprecated ones left out).
var sectionKeys = map[string]struct{ what, keys string }{
	"Topology": {"top-level", "the top-level keys are " + strings.Join(yamlerr.Keys(reflect.TypeFor[Topology](), deprecated), ", ")},
	"Lane":     {"lane", "a lane's keys are " + strings.Join(yamlerr.Keys(reflect.TypeFor[Lane](), deprecated), ", ")},
}

// deprecated reports a field kept for an old spelling of its key: still
// read, never suggested.
func deprecated(f reflect.StructField) bool { return strings.HasPrefix(f.Name, "Deprecated") }

// knownFields rewrites yaml.v3's unknown-field errors, which named a Go
// type ("line 3: field shard not found in type topology.Lane"), to name
// the key and the keys its section takes.
func knownFields(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		msgs[i] = e
		if m := unknownField.FindStringSubmatchIndex(e); m != nil {
			key, typ := e[m[2]:m[3]], e[m[4]:m[5]]
			sk := sectionKeys[typ]
			msgs[i] = fmt.Sprintf("%sunknown %s key %q (%s)", e[:m[0]], sk.what, key, sk.keys)
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// givenTopology and givenLane hold the keys a file sets, nil when left
// out (or null), to tell a zero written in the file from a key left out:
// WithDefaults fills both alike, and a value written must never become
// the default without a word.
type givenTopology struct {
	Prefix          *string     `yaml:"prefix"`
	MaxReceiveCount *int        `yaml:"max_receive_count"`
	Lanes           []givenLane `yaml:"lanes"`
}

type givenLane struct {
	Name              string    `yaml:"name"`
	Shards            *int      `yaml:"shards"`
	ShardChoices      *int      `yaml:"shard_choices"`
	Weight            *int      `yaml:"weight"`
	VisibilityTimeout *Duration `yaml:"visibility_timeout"`
	Retention         *Duration `yaml:"retention"`
	StalenessBound    *Duration `yaml:"staleness_bound"`
	Capacity          *float64  `yaml:"capacity"`
	DrainRate         *float64  `yaml:"drain_rate"`
	SLA               *Duration `yaml:"sla"`
	HighWaterMark     *int64    `yaml:"high_water_mark"`
}

// checkGiven refuses the zeros that data, a topology file, writes where
// a zero field means the default, saying what to write instead.
func checkGiven(data []byte) error {
	var g givenTopology
	if err := yaml.Unmarshal(data, &g); err != nil {
		return err // not reached: Parse decoded the file already
	}
	var errs []error
	if g.Prefix != nil && *g.Prefix == "" {
		errs = append(errs, fmt.Errorf(`prefix "": leave the key out for the default (%s), or give lowercase letters, digits and hyphens`, PrefixDefault))
	}
	refuseZero(&errs, "max_receive_count", g.MaxReceiveCount, MaxReceiveCountDefault, "give 1 to 1000")
	for i, l := range g.Lanes {
		at := fmt.Sprintf("lanes[%d] (%s): ", i, l.Name)
		refuseZero(&errs, at+"shards", l.Shards, ShardsDefault, "give 1 to 1000")
		refuseZero(&errs, at+"shard_choices", l.ShardChoices, ShardChoicesDefault, "give at least 1")
		refuseZero(&errs, at+"weight", l.Weight, WeightDefault, fmt.Sprintf("give 1 to %d (every lane is drained)", MaxWeight))
		refuseZero(&errs, at+"visibility_timeout", l.VisibilityTimeout, Duration(VisibilityTimeoutDefault), "give 1s to 12h")
		refuseZero(&errs, at+"retention", l.Retention, Duration(RetentionDefault), "give 1m to 336h")
		refuseZero(&errs, at+"staleness_bound", l.StalenessBound, Duration(StalenessBoundDefault),
			"give a positive duration such as 5m; a lane cannot turn backlogging off, but a long bound such as 24h backlogs almost nothing")
		refuseZero(&errs, at+"capacity", l.Capacity, CapacityDefault, "give the jobs per second the lane's drainers are provisioned for")
		refuseZero(&errs, at+"drain_rate", l.DrainRate, CapacityDefault, "give capacity instead (drain_rate is its deprecated name), a positive number of jobs per second")
		refuseZero(&errs, at+"sla", l.SLA, Duration(SLADefault), "give a positive duration")
		refuseZero(&errs, at+"high_water_mark", l.HighWaterMark, "capacity × sla",
			"give a positive number of jobs; for no refusals in practice, give one far above the lane's backlog")
	}
	return errors.Join(errs...)
}

// refuseZero adds an error to errs if v, the value of key in the file, is
// set to zero, which would be taken as def.
func refuseZero[T comparable](errs *[]error, key string, v *T, def any, want string) {
	if isZero(v) {
		*errs = append(*errs, fmt.Errorf("%s %v: leave the key out for the default (%v), or %s", key, *v, def, want))
	}
}

// isZero reports whether p is set to its type's zero.
func isZero[T comparable](p *T) bool {
	var zero T
	return p != nil && *p == zero
}

// QueueName is the naming rule shared with Terraform. For KindShard, index
// is the shard number; it is ignored for other kinds.
func QueueName(prefix, lane string, kind Kind, index int) string {
	if kind == KindShard {
		return fmt.Sprintf("%s-%s-shard-%02d", prefix, lane, index)
	}
	return fmt.Sprintf("%s-%s-%s", prefix, lane, kind)
}

// Lane returns the named lane.
func (t Topology) Lane(name string) (Lane, bool) {
	for _, l := range t.Lanes {
		if l.Name == name {
			return l, true
		}
	}
	return Lane{}, false
}

// ShardQueue names shard i of lane.
func (t Topology) ShardQueue(lane string, i int) string {
	return QueueName(t.Prefix, lane, KindShard, i)
}

// SpilloverQueue names lane's spillover queue.
func (t Topology) SpilloverQueue(lane string) string {
	return QueueName(t.Prefix, lane, KindSpillover, 0)
}

// BacklogQueue names lane's backlog queue.
func (t Topology) BacklogQueue(lane string) string {
	return QueueName(t.Prefix, lane, KindBacklog, 0)
}

// DLQ names lane's dead-letter queue.
func (t Topology) DLQ(lane string) string {
	return QueueName(t.Prefix, lane, KindDLQ, 0)
}

// QueueInfo is one queue of the topology with its place in it.
type QueueInfo struct {
	Spec  queue.QueueSpec
	Lane  string
	Kind  Kind
	Shard int // shard index for KindShard, else 0
	// Retired marks a shard queue past its lane's Shards that still held
	// jobs at start (RetiredShards): drained until empty, sent nothing.
	Retired bool
}

// Queues lists every queue of the topology, each lane's dead-letter queue
// before the queues that redrive to it.
func (t Topology) Queues() []QueueInfo {
	var out []QueueInfo
	for _, l := range t.Lanes {
		dlq := t.DLQ(l.Name)
		base := queue.QueueSpec{
			VisibilityTimeout: time.Duration(l.VisibilityTimeout),
			Retention:         time.Duration(l.Retention),
		}
		// The DLQ keeps messages for the longest retention SQS allows, so
		// operators have time to inspect and replay them.
		dlqSpec := base
		dlqSpec.Name = dlq
		dlqSpec.Retention = 14 * 24 * time.Hour
		out = append(out, QueueInfo{Spec: dlqSpec, Lane: l.Name, Kind: KindDLQ})
		redriven := func(name string, kind Kind, shard int) QueueInfo {
			s := base
			s.Name = name
			s.DeadLetterQueue = dlq
			s.MaxReceiveCount = t.MaxReceiveCount
			return QueueInfo{Spec: s, Lane: l.Name, Kind: kind, Shard: shard}
		}
		for i := range l.Shards + l.RetiredShards {
			q := redriven(t.ShardQueue(l.Name, i), KindShard, i)
			q.Retired = i >= l.Shards
			out = append(out, q)
		}
		out = append(out, redriven(t.SpilloverQueue(l.Name), KindSpillover, 0))
		out = append(out, redriven(t.BacklogQueue(l.Name), KindBacklog, 0))
	}
	return out
}

// WithRetiredShards returns t with each lane's RetiredShards set from
// nonEmpty, the names of queues that hold jobs: the shard queues past a
// lane's Shards up to the last of them named there (a lane whose shard
// count was lowered while its removed shards held jobs).
func (t Topology) WithRetiredShards(nonEmpty []string) Topology {
	held := make(map[string]bool, len(nonEmpty))
	for _, name := range nonEmpty {
		held[name] = true
	}
	t.Lanes = slices.Clone(t.Lanes)
	for i, l := range t.Lanes {
		l.RetiredShards = 0
		for s := l.Shards; s < MaxShards; s++ {
			if held[t.ShardQueue(l.Name, s)] {
				l.RetiredShards = s + 1 - l.Shards
			}
		}
		t.Lanes[i] = l
	}
	return t
}

// Names returns the names of Queues, in the same order.
func (t Topology) Names() []string {
	qs := t.Queues()
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Spec.Name
	}
	return names
}

// Specs returns the queue specs of Queues, in the same order.
func (t Topology) Specs() []queue.QueueSpec {
	qs := t.Queues()
	specs := make([]queue.QueueSpec, len(qs))
	for i, q := range qs {
		specs[i] = q.Spec
	}
	return specs
}
