// Package flagconf fills a flag.FlagSet from, in order of precedence, the
// command line, environment variables and a YAML config file, so every
// setting has one name in three forms: --data-dir, SLUICE_DATA_DIR, and
// data-dir: in the file.
package flagconf

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/yamlerr"
)

// Parse parses args into fs, then sets each flag not given on the command
// line from the environment variable prefix_NAME (upper case, '-' → '_'),
// then from the YAML file named by the flag configFlag, if set. Unknown
// keys in the file are errors that name the key and line; so is an
// argument that is not a flag.
func Parse(fs *flag.FlagSet, args []string, envPrefix, configFlag string) error {
	// A mistaken flag gets one line, the error returned, which says where
	// the list is: the flag package printed the whole list (about a
	// hundred lines) after its report, burying it. -h and --help print
	// the list as before.
	out := fs.Output()
	if !slices.ContainsFunc(args, IsHelp) {
		fs.SetOutput(io.Discard)
	}
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (%s --help lists the flags)", err, fs.Name())
	}
	// The flag package stops at the first argument that is not a flag:
	// "--drain false" set --drain to true and dropped "false", with every
	// flag after it (found in review).
	if fs.NArg() > 0 {
		hint := ""
		if a := fs.Arg(0); a == "true" || a == "false" {
			hint = " (a boolean flag takes its value after '=', as in --flag=" + a + ")"
		}
		return fmt.Errorf("unexpected argument %q: settings are flags%s", fs.Arg(0), hint)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := EnvName(envPrefix, f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if err := set(fs, f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("environment %s=%q: %w", env, v, err))
			}
			given[f.Name] = true
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	cf := fs.Lookup(configFlag)
	if cf == nil || cf.Value.String() == "" {
		return nil
	}
	path := cf.Value.String()
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	return applyYAML(fs, path, data, configFlag, given)
}

// applyYAML sets the flags named in data, a YAML mapping of setting:
// value read from path, except configFlag and those in given.
func applyYAML(fs *flag.FlagSet, path string, data []byte, configFlag string, given map[string]bool) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil // no document: only comments, or nothing
	} else if err != nil {
		return fmt.Errorf("config file %s: %w", path, yamlerr.Locate(data, err))
	}
	// The settings after a "---" were dropped without a word (found in
	// review).
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if len(next.Content) > 0 {
			line = next.Content[0].Line
		}
		if err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		return fmt.Errorf("config file %s: line %d: a second YAML document (after ---): put every setting in one mapping", path, line)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("config file %s: line %d: want a mapping of setting: value", path, m.Line)
	}
	var errs []error
	firstLine := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		f := fs.Lookup(k.Value)
		first, dup := firstLine[k.Value]
		if !dup {
			firstLine[k.Value] = k.Line
		}
		switch {
		case dup:
			errs = append(errs, fmt.Errorf("config file %s: line %d: %s is set twice (first on line %d)", path, k.Line, k.Value, first))
		case f == nil || k.Value == configFlag:
			errs = append(errs, fmt.Errorf("config file %s: line %d: unknown setting %q", path, k.Line, k.Value))
		case v.Kind != yaml.ScalarNode:
			errs = append(errs, fmt.Errorf("config file %s: line %d: %s: want a single value", path, v.Line, k.Value))
		case given[k.Value]:
			// The command line or environment wins.
		default:
			value := v.Value
			if v.ShortTag() == "!!null" {
				// null, ~ or nothing: the empty value, as YAML means it.
				// The text "null" became the value (admin-key: null made
				// "null" the admin key; found in review).
				value = ""
			}
			if err := set(fs, k.Value, value); err != nil {
				errs = append(errs, fmt.Errorf("config file %s: line %d: %s: %w", path, v.Line, k.Value, err))
			}
		}
	}
	return errors.Join(errs...)
}

// set sets the flag name to value. The flag package's own errors are a
// bare "parse error" or "value out of range": they gain what the flag
// wants (SLUICE_SHUTDOWN_GRACE=30 said nothing of the unit, drain: no
// nothing of the words; found in review).
func set(fs *flag.FlagSet, name, value string) error {
	err := fs.Set(name, value)
	if err == nil {
		return nil
	}
	f := fs.Lookup(name)
	if f == nil || strings.Contains(err.Error(), "want ") {
		return err
	}
	want := ""
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		want = "true or false"
	} else if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			want = "a duration such as 30s"
		case int, int64, uint, uint64:
			want = "a whole number"
		case float64:
			want = "a number"
		}
	}
	if want == "" {
		return err
	}
	return fmt.Errorf("%w: want %s", err, want)
}

// IsHelp reports whether arg asks the flag package for the list of flags
// (it answers -h and -help, with one dash or two, when no flag has that
// name): Parse prints the list only then.
func IsHelp(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}
