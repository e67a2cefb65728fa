package tenant

import (
	"crypto/sha256"
	"fmt"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Worker is a pull worker's credential: the lanes a worker presenting one
// of its keys may serve. Worker keys live in the tenant file's "workers"
// list, hashed and reloaded live like tenant keys:
//
//	workers:
//	  - name: billing-pool
//	    api_key_sha256: [9f86d08…]
//	    lanes: [premium, standard]   # empty: every lane
//
// A worker key is never a tenant key: the two cannot submit and pull with
// the same credential.
type Worker struct {
	Name string
	// Lanes the worker may serve; empty means every lane.
	Lanes []string
}

// Serves reports whether w may take jobs from lane.
func (w *Worker) Serves(lane string) bool {
	return len(w.Lanes) == 0 || slices.Contains(w.Lanes, lane)
}

// workerEntry is a worker credential as written in the file.
type workerEntry struct {
	Name         string   `yaml:"name"`
	APIKeys      []string `yaml:"api_keys"`
	APIKeySHA256 []string `yaml:"api_key_sha256"`
	Lanes        []string `yaml:"lanes"`

	line int
}

var workerFields = yamlFields(reflect.TypeFor[workerEntry]())

func (e *workerEntry) UnmarshalYAML(node *yaml.Node) error {
	if err := checkFields(node, workerFields, "worker"); err != nil {
		return err
	}
	type plain workerEntry
	var p plain
	if err := node.Decode(&p); err != nil {
		return err
	}
	*e = workerEntry(p)
	e.line = node.Line
	return nil
}

// addWorkers checks the workers list and adds it; it runs after every
// tenant is added, so that a key shared with a tenant is caught.
func (b *builder) addWorkers(entries []workerEntry) {
	c := b.c
	c.workers = map[[sha256.Size]byte]*Worker{}
	names := map[string]bool{}
	for i := range entries {
		e := &entries[i]
		fail := func(format string, args ...any) {
			b.errs = append(b.errs, fmt.Errorf("line %d: worker %q: %s", e.line, e.Name, fmt.Sprintf(format, args...)))
		}
		if !idRE.MatchString(e.Name) {
			fail("name must be 1-64 letters, digits, '.', '_' or '-'")
		}
		if names[e.Name] {
			fail("duplicate worker name")
		}
		names[e.Name] = true
		if len(e.APIKeys)+len(e.APIKeySHA256) == 0 {
			fail("no api_keys or api_key_sha256")
		}
		for _, l := range e.Lanes {
			if !idRE.MatchString(l) {
				fail("lane %q is not a lane name", l)
			}
		}
		w := &Worker{Name: e.Name, Lanes: slices.Clone(e.Lanes)}
		add := func(sum [sha256.Size]byte) {
			if t := c.byKey[sum]; t != nil {
				fail("api key belongs to tenant %q: worker keys must differ from tenant keys", t.ID)
				return
			}
			if o := c.workers[sum]; o != nil && o.Name != w.Name {
				fail("api key already belongs to worker %q", o.Name)
			}
			c.workers[sum] = w
		}
		for _, k := range e.APIKeys {
			if msg := keyProblem(k); msg != "" {
				fail("%s", msg)
				continue
			}
			add(sha256.Sum256([]byte(k)))
		}
		for i, h := range e.APIKeySHA256 {
			var sum [sha256.Size]byte
			if len(h) != 2*sha256.Size || hexDecode(sum[:], h) != nil {
				fail("api_key_sha256[%d] is not 64 hex digits (a plain key belongs under api_keys)", i)
				continue
			}
			add(sum)
		}
		c.workerList = append(c.workerList, w)
	}
}

// AuthenticateWorker returns the worker credential owning key.
func (c *Config) AuthenticateWorker(key string) (*Worker, bool) {
	w, ok := c.workers[sha256.Sum256([]byte(key))]
	return w, ok
}

// Workers returns the configured worker credentials, in file order; none
// means the file configures no pull workers.
func (c *Config) Workers() []*Worker { return c.workerList }
