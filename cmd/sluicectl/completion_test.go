package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletion loads each shell's script in the real shell and asks it
// to complete; a shell that is not installed is skipped.
func TestCompletion(t *testing.T) {
	t.Parallel()
	ctl := filepath.Join(binDir, "sluicectl")
	tests := []struct {
		shell  string
		script string
		want   []string
	}{
		{"bash", `source <("$CTL" completion bash); COMP_WORDS=(sluicectl d); COMP_CWORD=1; _sluicectl; echo "${COMPREPLY[@]}"`, []string{"dlq"}},
		{"bash", `source <("$CTL" completion bash); COMP_WORDS=(sluicectl dlq re); COMP_CWORD=2; _sluicectl; echo "${COMPREPLY[@]}"`, []string{"replay", "redrive"}},
		{"bash", `source <("$CTL" completion bash); COMP_WORDS=(sluicectl dlq replay --dr); COMP_CWORD=3; _sluicectl; echo "${COMPREPLY[@]}"`, []string{"--dry-run"}},
		{"bash", `source <("$CTL" completion bash); COMP_WORDS=(sluicectl submit --idem); COMP_CWORD=2; _sluicectl; echo "${COMPREPLY[@]}"`, []string{"--idempotency-key"}},
		{"zsh", `autoload -U compinit && compinit -u; source <("$CTL" completion zsh); echo "${_comps[sluicectl]}"`, []string{"_bash_complete"}},
		{"fish", `"$CTL" completion fish | source; complete -C "sluicectl dlq li"; complete -C "sluicectl dlq replay --dr"; complete -C "sluicectl wo"`, []string{"list", "--dry-run", "worker"}},
	}
	for _, tc := range tests {
		path, err := exec.LookPath(tc.shell)
		if err != nil {
			t.Logf("%s is not installed: its completion is not tested here", tc.shell)
			continue
		}
		cmd := exec.Command(path, "-c", tc.script)
		cmd.Env = append(cmd.Environ(), "CTL="+ctl, "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", tc.shell, err, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s %q: completed %q, want %q among them", tc.shell, tc.script, out, w)
			}
		}
	}
}
