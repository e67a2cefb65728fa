package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

func setupCompletion(*flag.FlagSet) runFunc {
	return func(_ context.Context, e *env, args []string) error {
		if err := wantArgs(args, 1, "give the shell: sluicectl completion bash, zsh or fish"); err != nil {
			return err
		}
		switch args[0] {
		case "bash":
			return writeBash(e.stdout)
		case "zsh":
			fmt.Fprint(e.stdout, "#compdef sluicectl\n# zsh completion for sluicectl: source it, or put it in a file on $fpath.\nautoload -U +X bashcompinit && bashcompinit\n")
			return writeBash(e.stdout)
		case "fish":
			return writeFish(e.stdout)
		}
		return fmt.Errorf("no completion for shell %q: give bash, zsh or fish", args[0])
	}
}

// flagsOf lists a command's flags as its FlagSet has them.
func flagsOf(c command) []*flag.Flag {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.setup(fs)
	var out []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	return out
}

// words splits the command table into top-level words and dlq's
// subcommands.
func words() (top, dlq []string) {
	for _, c := range commands {
		w, sub, ok := strings.Cut(c.name, " ")
		if ok {
			dlq = append(dlq, sub)
		}
		if !slices.Contains(top, w) {
			top = append(top, w)
		}
	}
	return append(top, "help"), dlq
}

func writeBash(w io.Writer) error {
	top, dlq := words()
	var b strings.Builder
	fmt.Fprintf(&b, `# bash completion for sluicectl: source <(sluicectl completion bash)
_sluicectl() {
  local cur=${COMP_WORDS[COMP_CWORD]} w1=${COMP_WORDS[1]} key flags=""
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W %q -- "$cur")); return
  fi
  case $w1 in
    dlq)
      if [[ $COMP_CWORD -eq 2 ]]; then COMPREPLY=($(compgen -W %q -- "$cur")); return; fi
      key="dlq ${COMP_WORDS[2]}" ;;
    completion)
      if [[ $COMP_CWORD -eq 2 ]]; then COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")); fi
      return ;;
    help)
      COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
    *) key=$w1 ;;
  esac
  case $key in
`, strings.Join(top, " "), strings.Join(dlq, " "), strings.Join(top, " "))
	for _, c := range commands {
		var names []string
		for _, f := range flagsOf(c) {
			names = append(names, "--"+f.Name)
		}
		fmt.Fprintf(&b, "    %q) flags=%q ;;\n", c.name, strings.Join(names, " "))
	}
	b.WriteString(`  esac
  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$flags --help" -- "$cur")); else COMPREPLY=($(compgen -f -- "$cur")); fi
}
complete -F _sluicectl sluicectl
`)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeFish(w io.Writer) error {
	top, dlq := words()
	var b strings.Builder
	b.WriteString("# fish completion for sluicectl: sluicectl completion fish > ~/.config/fish/completions/sluicectl.fish\n")
	b.WriteString("complete -c sluicectl -f\n")
	for _, c := range commands {
		word, sub, isDLQ := strings.Cut(c.name, " ")
		if isDLQ {
			fmt.Fprintf(&b, "complete -c sluicectl -n '__fish_seen_subcommand_from dlq; and not __fish_seen_subcommand_from %s' -a %s -d %s\n",
				strings.Join(dlq, " "), sub, fishQuote(c.summary))
		} else {
			fmt.Fprintf(&b, "complete -c sluicectl -n '__fish_use_subcommand' -a %s -d %s\n", word, fishQuote(c.summary))
		}
		cond := "__fish_seen_subcommand_from " + word
		if isDLQ {
			cond = "__fish_seen_subcommand_from dlq; and __fish_seen_subcommand_from " + sub
		}
		for _, f := range flagsOf(c) {
			fmt.Fprintf(&b, "complete -c sluicectl -n '%s' -l %s -d %s\n", cond, f.Name, fishQuote(f.Usage))
		}
	}
	fmt.Fprintf(&b, "complete -c sluicectl -n '__fish_use_subcommand' -a dlq -d %s\n", fishQuote("dead-letter queues: "+strings.Join(dlq, ", ")))
	fmt.Fprintf(&b, "complete -c sluicectl -n '__fish_use_subcommand' -a help -d %s\n", fishQuote("help on a command"))
	fmt.Fprintf(&b, "complete -c sluicectl -n '__fish_seen_subcommand_from help' -a %s\n", fishQuote(strings.Join(top, " ")))
	b.WriteString("complete -c sluicectl -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fishQuote single-quotes s for fish.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
