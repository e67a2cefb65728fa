// Package ctl is sluicectl, the one command-line tool for sluice's users
// and operators: submit jobs, read queue stats and tenant limits, look at
// and replay dead letters, run a logging worker, and print shell
// completion. cmd/sluicectl is its main; cmd/drainer's operator
// subcommands are aliases for it.
//
// Every command takes its flags before or after its arguments; --help
// prints them and exits 0; --json prints the API's answer as protobuf
// JSON for scripts.
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/sluice-dev/sluice/internal/flagconf"
)

// command is one sluicectl command. setup registers its flags on fs and
// returns the function that runs it with the positional arguments.
type command struct {
	name    string // "stats", "dlq list"
	args    string // positional arguments, for the usage line
	summary string
	setup   func(fs *flag.FlagSet) runFunc
}

type runFunc func(ctx context.Context, e *env, args []string) error

// env is where a command writes.
type env struct {
	stdout, stderr io.Writer
}

// commands is every command, in the order help lists them.
var commands []command

func init() {
	commands = []command{
		{"submit", "payload", "submit a job to the gateway (payload - reads stdin)", setupSubmit},
		{"stats", "", "depth, in flight, delayed and oldest age of every queue", setupStats},
		{"limits", "tenant", "a tenant's effective limits and the config version they come from", setupLimits},
		{"top", "", "live fairness: utilization, Jain's index and the top tenants by share of worker time", setupTop},
		{"dlq list", "", "list dead-lettered jobs with their reason and last error", setupDLQList},
		{"dlq show", "job-id", "one dead-lettered job in full: reason, last error, attributes, payload", setupDLQShow},
		{"dlq replay", "", "replay dead-lettered jobs (--dry-run to preview)", setupDLQReplay},
		{"dlq status", "[replay-id]", "a replay's progress, or every replay", setupDLQStatus},
		{"dlq cancel", "replay-id", "stop a running replay", setupDLQCancel},
		{"dlq redrive", "", "move a lane's whole DLQ back with SQS's native move task; --status follows it, --cancel stops it", setupDLQRedrive},
		{"worker", "", "serve a worker that logs each job it is given (for trying sluice out)", setupWorker},
		{"completion", "bash|zsh|fish", "print a shell completion script", setupCompletion},
	}
}

func lookup(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

// Main runs sluicectl with the process's arguments and exits.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluicectl:", err)
		os.Exit(1)
	}
}

// Run runs one sluicectl command line (without the program name). Help
// goes to stdout and returns nil; a usage mistake returns an error saying
// what to fix.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		usage(stderr, "")
		return errors.New("give a command (see above, or sluicectl help)")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout, "")
			return nil
		}
		return Run(ctx, append(rest, "--help"), stdout, stderr)
	case "dlq":
		if len(rest) == 0 || isHelp(rest[0]) {
			usage(stdout, "dlq ")
			if len(rest) == 0 {
				return errors.New("dlq needs a subcommand: list, show, replay, status, cancel or redrive")
			}
			return nil
		}
		name, rest = "dlq "+rest[0], rest[1:]
	}
	cmd, ok := lookup(name)
	if !ok && strings.HasPrefix(name, "dlq ") {
		usage(stderr, "dlq ")
		return fmt.Errorf("dlq needs a subcommand: list, show, replay, status, cancel or redrive (not %q)", strings.TrimPrefix(name, "dlq "))
	}
	if !ok && strings.HasPrefix(name, "-") {
		// Flags belong to a command ("sluicectl --admin-addr X stats" was
		// answered unknown command "--admin-addr", found in a scale test).
		usage(stderr, "")
		return fmt.Errorf("flags go after the command: sluicectl <command> %s … (see the list above)", name)
	}
	if !ok {
		usage(stderr, "")
		return fmt.Errorf("unknown command %q (see the list above)", name)
	}
	fs := flag.NewFlagSet("sluicectl "+cmd.name, flag.ContinueOnError)
	// A mistaken flag is answered by the one line returned below, which
	// names the flag and where the list is: the flag package's own
	// report, the whole list and then that line buried the mistake.
	fs.SetOutput(io.Discard)
	if slices.ContainsFunc(rest, isHelp) {
		fs.SetOutput(stdout)
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: sluicectl %s [flags] %s\n\n%s.\n\nflags:\n", cmd.name, cmd.args, upperFirst(cmd.summary))
		flagconf.PrintDefaults(fs)
	}
	run := cmd.setup(fs)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w (sluicectl %s --help lists the flags)", err, cmd.name)
	}
	return run(ctx, e, pos)
}

// isHelp: a flag that asks for the list of flags (flagconf.IsHelp), or
// the word help.
func isHelp(a string) bool { return flagconf.IsHelp(a) || a == "help" }

// parseInterleaved parses flags wherever they appear among the positional
// arguments ("limits acme --json" as well as "limits --json acme"); "--"
// ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rem := fs.Args()
		if len(rem) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rem); i > 0 && args[i-1] == "--" {
			return append(pos, rem...), nil
		}
		pos = append(pos, rem[0])
		args = rem[1:]
	}
}

func usage(w io.Writer, prefix string) {
	fmt.Fprintln(w, "usage: sluicectl <command> [flags] [arguments]")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		if strings.HasPrefix(c.name, prefix) {
			fmt.Fprintf(tw, "  %s %s\t%s\n", c.name, c.args, c.summary)
		}
	}
	_ = tw.Flush()
	fmt.Fprint(w, `
sluicectl <command> --help lists a command's flags. Admin commands (stats,
limits, dlq) find the admin API at --admin-addr (SLUICE_ADMIN_ADDR,
default 127.0.0.1:7071) with --admin-key (SLUICE_ADMIN_KEY, or the file
<data-dir>/admin-key); submit finds the gateway at --addr with --key
(SLUICE_API_KEY). --json prints the API's answer for scripts.
`)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// wantArgs checks the number of positional arguments; what says which.
func wantArgs(args []string, n int, what string) error {
	if len(args) != n {
		return fmt.Errorf("%s (got %d arguments: %q)", what, len(args), args)
	}
	return nil
}
