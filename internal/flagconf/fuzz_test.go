package flagconf

import (
	"flag"
	"strings"
	"testing"
)

func TestDuplicateSetting(t *testing.T) {
	fs, _, _, _ := newSet()
	err := applyYAML(fs, "c.yaml", []byte("workers: 1\nlisten-addr: a\nworkers: 2\n"), "config", map[string]bool{})
	if err == nil || !strings.Contains(err.Error(), "config file c.yaml: line 3: workers is set twice (first on line 1)") {
		t.Fatalf("err = %v", err)
	}
}

// FuzzApplyYAML feeds arbitrary config files to the loader: it never
// panics, every error names the file, and when it succeeds every flag it
// changed was set by a key of the file.
func FuzzApplyYAML(f *testing.F) {
	f.Add([]byte("listen-addr: from-file\nworkers: 7\ngrace: 5s\n"))
	f.Add([]byte("workers: {a: 1}\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("config: other.yaml\n"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, _, _, _ := newSet()
		before := map[string]string{}
		fs.VisitAll(func(fl *flag.Flag) { before[fl.Name] = fl.Value.String() })
		err := applyYAML(fs, "fuzz.yaml", data, "config", map[string]bool{"grace": true})
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.yaml") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		fs.VisitAll(func(fl *flag.Flag) {
			changed := fl.Value.String() != before[fl.Name]
			if changed && (fl.Name == "grace" || fl.Name == "config" || !strings.Contains(string(data), fl.Name)) {
				t.Fatalf("flag %s changed to %q by %q", fl.Name, fl.Value.String(), data)
			}
		})
	})
}
