package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/internal/ctl"
)

const cliUsage = `usage:
  drainer [run] [flags]     run the drainers and the admin API (drainer run --help lists the flags)

The operator commands moved to sluicectl (sluicectl help); these aliases
still work and print a pointer:
  drainer stats | limits | top | dlq list|show|replay|status|cancel|redrive
`

// alias runs an operator command that moved to sluicectl, after a one-line
// pointer on stderr (stdout stays the command's, for scripts).
func alias(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	n := 1
	if args[0] == "dlq" && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		n = 2
	}
	fmt.Fprintf(stderr, "drainer %[1]s is now sluicectl %[1]s (this alias keeps working)\n", strings.Join(args[:n], " "))
	return ctl.Run(ctx, args, stdout, stderr)
}
