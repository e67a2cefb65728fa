package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpFlags runs bin with args (a --help) and returns the flags its help
// lists; the run must exit 0.
func helpFlags(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	out, err := exec.Command(filepath.Join(env.Bin, bin), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v (it must exit 0)\n%s", bin, args, err, out)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, "--"+m[1])
	}
	if len(flags) == 0 {
		t.Fatalf("%s %v listed no flags:\n%s", bin, args, out)
	}
	return flags
}

// readmeFlags returns the flags the README's configuration table names
// in its first column.
func readmeFlags(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "## Configuration")
	if start < 0 {
		t.Fatal("README has no ## Configuration section")
	}
	s = s[start:]
	s = s[:strings.Index(s[3:], "\n#")+3]
	var flags []string
	for line := range strings.Lines(s) {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "| `--") {
			continue
		}
		for _, m := range regexp.MustCompile("`(--[a-z0-9-]+)`").FindAllStringSubmatch(cells[1], -1) {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// TestReadmeFlagTable keeps the README's configuration table and the
// binaries' --help in step: every flag a binary shows is in the table, and
// every flag in the table is one a binary shows.
func TestReadmeFlagTable(t *testing.T) {
	t.Parallel()
	table := readmeFlags(t)
	shown := map[string][]string{}
	for _, c := range [][]string{{"gateway", "--help"}, {"drainer", "--help"}, {"drainer", "run", "--help"}} {
		for _, f := range helpFlags(t, c[0], c[1:]...) {
			if !slices.Contains(shown[f], c[0]) {
				shown[f] = append(shown[f], c[0])
			}
		}
	}
	for f, bins := range shown {
		if !slices.Contains(table, f) {
			t.Errorf("%s --help shows %s, but the README's configuration table does not list it", strings.Join(bins, " and "), f)
		}
	}
	for _, f := range table {
		if shown[f] == nil {
			t.Errorf("the README's configuration table lists %s, which no binary's --help shows", f)
		}
	}
}

// TestMistakenFlagIsOneLine: a misspelt flag is refused in one line that
// names it and says where the list is, not above the whole list of flags.
func TestMistakenFlagIsOneLine(t *testing.T) {
	t.Parallel()
	for _, c := range [][]string{{"gateway", "--listn", "x"}, {"drainer", "run", "--listn", "x"}} {
		out, err := exec.Command(filepath.Join(env.Bin, c[0]), c[1:]...).CombinedOutput()
		want := c[0] + ": flag provided but not defined: -listn (" + c[0] + " --help lists the flags)\n"
		if err == nil || string(out) != want {
			t.Errorf("%v: err=%v, output %q; want exit 1 and %q", c, err, out, want)
		}
	}
}
