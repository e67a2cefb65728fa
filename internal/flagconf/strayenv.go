package flagconf

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// StrayEnv returns a warning for each variable of environ (as os.Environ
// gives it) named prefix_* that sets no flag of fs and is at most two
// edits from the name of one that would: most likely a misspelling, which
// Parse would otherwise pass over without a word (SLUICE_CONCURENCY=64
// left the default in force; found in a walkthrough). Names farther from
// every flag are left alone: other programs, sluicectl among them, read
// variables of the same prefix.
func StrayEnv(fs *flag.FlagSet, prefix string, environ []string) []string {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[EnvName(prefix, f.Name)] = true })
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, prefix+"_") || known[name] {
			continue
		}
		if near := nearest(name, known); near != "" {
			warnings = append(warnings, fmt.Sprintf("environment variable %s sets nothing: %s has no such setting; did you mean %s?", name, fs.Name(), near))
		}
	}
	slices.Sort(warnings)
	return warnings
}

// EnvName is the environment variable that sets the flag name: prefix_NAME,
// upper case, '-' → '_'.
func EnvName(prefix, name string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// nearest returns the name of known at most two edits from name, the
// closest one (the first in order among equals), or "" if none is.
func nearest(name string, known map[string]bool) string {
	best, bestDist := "", 3
	for k := range known {
		if d := editDistance(name, k); d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
