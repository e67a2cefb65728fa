package flagconf

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newSet() (*flag.FlagSet, *string, *int, *time.Duration) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	addr := fs.String("listen-addr", "default", "")
	n := fs.Int("workers", 1, "")
	d := fs.Duration("grace", time.Second, "")
	fs.String("config", "", "")
	return fs, addr, n, d
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte("listen-addr: from-file\nworkers: 7\ngrace: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEST_WORKERS", "9")
	fs, addr, n, d := newSet()
	if err := Parse(fs, []string{"--config", cfg, "--grace", "2s"}, "TEST", "config"); err != nil {
		t.Fatal(err)
	}
	// flag > env > file > default
	if *d != 2*time.Second || *n != 9 || *addr != "from-file" {
		t.Fatalf("got grace=%s workers=%d addr=%q", *d, *n, *addr)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file, env, want string
	}{
		{"unknown key", "listen-addr: x\nworkerz: 3\n", "", `line 2: unknown setting "workerz"`},
		{"bad value", "workers: many\n", "", "line 1: workers"},
		{"not a mapping", "- a\n- b\n", "", "want a mapping"},
		{"nested value", "workers: {a: 1}\n", "", "want a single value"},
		// yaml.v3 named line 1, where the mapping starts.
		{"an unclosed list", "listen-addr: x\nworkers: [3\ngrace: 2s\n", "", "yaml: line 2: did not find expected ',' or ']'"},
		{"bad env", "", "x", "environment TEST_WORKERS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := filepath.Join(dir, tt.name+".yaml")
			if err := os.WriteFile(cfg, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.env != "" {
				t.Setenv("TEST_WORKERS", tt.env)
			}
			fs, _, _, _ := newSet()
			err := Parse(fs, []string{"--config", cfg}, "TEST", "config")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestNullIsEmpty: a setting written as YAML's null (null, ~, or no value
// at all) is the empty value, as YAML means it. null and ~ used to set the
// text "null" or "~": admin-key: null (what a template renders for an
// unset value) made "null" the admin key, where empty means the key file.
func TestNullIsEmpty(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"", " null", " ~", " Null", " NULL", " !!null"} {
		fs, addr, _, _ := newSet()
		if err := applyYAML(fs, "c.yaml", []byte("listen-addr:"+v+"\n"), "config", map[string]bool{}); err != nil {
			t.Fatalf("listen-addr:%s: %v", v, err)
		}
		if *addr != "" {
			t.Errorf("listen-addr:%s set %q, want the empty value", v, *addr)
		}
	}
	// A quoted "null" is the text.
	fs, addr, _, _ := newSet()
	if err := applyYAML(fs, "c.yaml", []byte("listen-addr: \"null\"\n"), "config", map[string]bool{}); err != nil || *addr != "null" {
		t.Errorf("listen-addr: \"null\": %q, %v; want the text null", *addr, err)
	}
	// A number flag left null is refused, naming the line.
	fs, _, _, _ = newSet()
	if err := applyYAML(fs, "c.yaml", []byte("workers: ~\n"), "config", map[string]bool{}); err == nil || !strings.Contains(err.Error(), "line 1: workers") {
		t.Errorf("workers: ~: %v, want an error naming the line and setting", err)
	}
}

// TestSecondDocumentRefused: a config file of several YAML documents
// (--- between them) is refused. Only the first was read, and the
// settings after the --- were dropped without a word. A file with no
// document at all (only comments, every setting commented out) sets
// nothing; it was refused with a bare "EOF".
func TestSecondDocumentRefused(t *testing.T) {
	t.Parallel()
	fs, _, n, _ := newSet()
	err := applyYAML(fs, "c.yaml", []byte("listen-addr: a\n---\nworkers: 5\n"), "config", map[string]bool{})
	if err == nil || !strings.Contains(err.Error(), "line 3: a second YAML document") {
		t.Fatalf("err = %v (workers %d), want the file refused naming line 3", err, *n)
	}
	for _, ok := range []string{"listen-addr: a\n", "---\nlisten-addr: a\n", "listen-addr: a\n...\n", "# only a comment\n"} {
		fs, _, _, _ := newSet()
		if err := applyYAML(fs, "c.yaml", []byte(ok), "config", map[string]bool{}); err != nil {
			t.Errorf("%q: %v, want it read", ok, err)
		}
	}
}

// TestStrayArguments: an argument that is not a flag is refused, naming
// it. The flag package stops at the first one and leaves the rest
// unparsed: "--drain false" set --drain to true and dropped "false", and
// every flag after a stray word was ignored without a word.
func TestStrayArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--on", "false"}, `"false"`},
		{[]string{"stray", "--workers", "3"}, `"stray"`},
		{[]string{"--workers", "3", "--", "x"}, `"x"`},
	}
	for _, tt := range tests {
		fs, _, _, _ := newSet()
		fs.Bool("on", true, "")
		err := Parse(fs, tt.args, "TEST", "config")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q): %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
	fs, _, n, _ := newSet()
	if err := Parse(fs, []string{"--workers", "3"}, "TEST", "config"); err != nil || *n != 3 {
		t.Errorf("flags only: %v, workers %d", err, *n)
	}
}

// TestBadValueSaysWhatToWrite: a value from the environment or the file
// that its flag cannot take says what the flag wants. The flag package's
// own error is a bare "parse error": SLUICE_SHUTDOWN_GRACE=30 or drain: no
// (a YAML 1.1 boolean, a string in YAML 1.2) said nothing of the unit or
// the words to use (found in review).
func TestBadValueSaysWhatToWrite(t *testing.T) {
	tests := []struct{ name, value, want string }{
		{"grace", "30", "want a duration such as 30s"},
		{"workers", "many", "want a whole number"},
		{"on", "no", "want true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, from := range []string{"environment", "file"} {
				fs, _, _, _ := newSet()
				fs.Bool("on", true, "")
				var err error
				if from == "environment" {
					t.Setenv("TEST_"+strings.ToUpper(tt.name), tt.value)
					err = Parse(fs, nil, "TEST", "config")
				} else {
					err = applyYAML(fs, "c.yaml", []byte(tt.name+": "+tt.value+"\n"), "config", map[string]bool{})
				}
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s %s=%s: %v, want an error saying %q", from, tt.name, tt.value, err, tt.want)
				}
			}
		})
	}
}

// TestMistakenFlag: a flag that does not exist, or a bad value, is one
// error that names it and where the list of flags is, with nothing
// printed; --help prints the list.
func TestMistakenFlag(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args      []string
		want      string // in the error; "" for --help
		wantPrint bool
	}{
		{[]string{"--workerz", "3"}, "flag provided but not defined: -workerz (t --help lists the flags)", false},
		{[]string{"--workers", "many"}, `invalid value "many" for flag -workers`, false},
		{[]string{"--help"}, "", true},
		{[]string{"-h"}, "", true},
	}
	for _, tt := range tests {
		fs, _, _, _ := newSet()
		var out strings.Builder
		fs.SetOutput(&out)
		err := Parse(fs, tt.args, "TEST", "config")
		switch {
		case tt.want == "" && !errors.Is(err, flag.ErrHelp):
			t.Errorf("%q: err = %v, want flag.ErrHelp", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%q: err = %v, want it to contain %q", tt.args, err, tt.want)
		}
		if printed := out.Len() > 0; printed != tt.wantPrint {
			t.Errorf("%q: printed %q, want printing %v", tt.args, out.String(), tt.wantPrint)
		}
		if fs.Output() != &out {
			t.Errorf("%q: the flag set's output was not restored", tt.args)
		}
	}
}
