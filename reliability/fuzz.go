package reliability

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// FuzzTarget is one Go fuzz test.
type FuzzTarget struct {
	Pkg  string `json:"pkg"` // import path relative to the module, e.g. ./router
	Name string `json:"name"`
}

// FuzzResult is one target's run.
type FuzzResult struct {
	FuzzTarget
	Execs   int64         `json:"execs"`
	Elapsed time.Duration `json:"elapsed"`
	Failed  bool          `json:"failed"`
	// Flaked marks a run that go test failed with "context deadline
	// exceeded" at the end of -fuzztime without writing a failing input:
	// a race in Go's fuzzing coordinator (go.dev/issue/75804, fixed in
	// Go 1.27), not a finding.
	Flaked   bool   `json:"flaked"`
	Output   string `json:"output,omitempty"` // the tail of go test's output, on failure
	Interest int64  `json:"new_interesting"`
}

var fuzzFuncRE = regexp.MustCompile(`(?m)^func (Fuzz\w*)\(`)

// ListFuzzTargets finds the packages whose tests declare fuzz functions
// and asks `go test -list` for their fuzz targets.
func ListFuzzTargets(ctx context.Context) ([]FuzzTarget, error) {
	root := testcluster.ModuleDir()
	pkgs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if fuzzFuncRE.Match(data) {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			pkgs["./"+filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("find fuzz targets: %w", err)
	}
	var targets []FuzzTarget
	for _, pkg := range slices.Sorted(maps.Keys(pkgs)) {
		cmd := exec.CommandContext(ctx, "go", "test", "-list", "^Fuzz", pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("go test -list %s: %w\n%s", pkg, err, out)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			if strings.HasPrefix(line, "Fuzz") {
				targets = append(targets, FuzzTarget{Pkg: pkg, Name: strings.TrimSpace(line)})
			}
		}
	}
	return targets, nil
}

var execsRE = regexp.MustCompile(`execs: (\d+) .*new interesting: (\d+)`)

// RunFuzz runs one fuzz target for fuzztime and reads the executions from
// go test's progress lines.
func RunFuzz(ctx context.Context, t FuzzTarget, fuzztime time.Duration) FuzzResult {
	res := FuzzResult{FuzzTarget: t}
	corpus := filepath.Join(testcluster.ModuleDir(), t.Pkg, "testdata", "fuzz", t.Name)
	before := dirNames(corpus)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-fuzz", "^"+t.Name+"$", "-fuzztime", fuzztime.String(), t.Pkg)
	cmd.Dir = testcluster.ModuleDir()
	out, err := cmd.CombinedOutput()
	res.Elapsed = time.Since(start)
	res.Execs, res.Interest = parseFuzzOutput(out)
	if err != nil {
		newInput := len(dirNames(corpus)) > len(before)
		if !newInput && strings.Contains(string(out), "context deadline exceeded") {
			res.Flaked = true
			return res
		}
		res.Failed = true
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		res.Output = strings.Join(lines[max(0, len(lines)-15):], "\n")
	}
	return res
}

// parseFuzzOutput reads the last executions and new-interesting counts
// from go test -fuzz's progress lines.
func parseFuzzOutput(out []byte) (execs, interesting int64) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := execsRE.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			i, _ := strconv.ParseInt(m[2], 10, 64)
			execs, interesting = max(execs, n), max(interesting, i)
		}
	}
	return execs, interesting
}

// dirNames lists a directory's entries (none if it does not exist).
func dirNames(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names
}
