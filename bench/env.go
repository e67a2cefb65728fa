package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// Env is one harness run: the binaries it built, its scratch directory
// and, when a scenario needs it, the local SQS-compatible server
// (testcluster.Env), with the bare server's command and where progress
// goes.
type Env struct {
	*testcluster.Env
	// Root is the repository root (holds go.mod).
	Root string
	// BareCmd runs the bare grpc-go ingest server (see ServeBare): the
	// harness binary itself with its bare-server argument.
	BareCmd []string
	// Out receives progress lines and every figure as it is measured.
	Out io.Writer
}

// NewEnv builds cmd/gateway and cmd/drainer (without -race) into work.
func NewEnv(ctx context.Context, work string, bareCmd []string, out io.Writer) (*Env, error) {
	start := time.Now()
	te, err := testcluster.NewEnv(ctx, work)
	if err != nil {
		return nil, err
	}
	e := &Env{Env: te, Root: testcluster.ModuleDir(), BareCmd: bareCmd, Out: out}
	e.Logf("built cmd/gateway and cmd/drainer in %.1fs", time.Since(start).Seconds())
	return e, nil
}

// Logf prints a progress line.
func (e *Env) Logf(format string, args ...any) {
	fmt.Fprintf(e.Out, format+"\n", args...)
}
