package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

// topFlags are the flags of `drainer top`.
type topFlags struct {
	tenants  int
	interval time.Duration
	once     bool
}

func (f *topFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.tenants, "top", 10, "tenants shown per lane (1-1000)")
	fs.DurationVar(&f.interval, "interval", 2*time.Second, "time between refreshes")
	fs.BoolVar(&f.once, "once", false, "print one view and exit")
}

// top prints the drainers' fairness view, refreshed every interval until
// the context ends (Ctrl-C), or once.
func (c *cli) top(call func() (context.Context, context.CancelFunc), addr string, f topFlags) error {
	if f.tenants < 1 || f.tenants > 1000 {
		return fmt.Errorf("--top %d: give 1 to 1000 tenants per lane", f.tenants)
	}
	if f.interval < 100*time.Millisecond {
		return fmt.Errorf("--interval %s: give at least 100ms", f.interval)
	}
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		ctx, cancel := call()
		resp, err := c.admin.GetFairness(ctx, &adminv1.GetFairnessRequest{Top: int32(f.tenants)})
		cancel()
		if err != nil {
			return explain(err, addr)
		}
		if c.json {
			if err := c.printJSON(resp); err != nil {
				return err
			}
		} else if err := c.printFairness(resp); err != nil {
			return err
		}
		if f.once {
			return nil
		}
		select {
		case <-c.ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *cli) printFairness(resp *adminv1.GetFairnessResponse) error {
	fmt.Fprintf(c.out, "%s  slots %d, busy %d\n", time.Now().Format(time.TimeOnly), resp.GetSlots(), resp.GetBusy())
	if len(resp.GetLanes()) == 0 {
		fmt.Fprintln(c.out, "  no work in the last minute")
		return nil
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	for _, l := range resp.GetLanes() {
		fmt.Fprintf(tw, "lane %s\tutilization %s\tfairness (Jain) %s\theld %d\n", l.GetLane(), figure(l.GetUtilization()), figure(l.GetJainIndex()), l.GetHeld())
		fmt.Fprintln(tw, "  TENANT\tSHARE\tWEIGHT\tSTATE\tIN FLIGHT\tHELD\tWANTS MORE")
		for _, t := range l.GetTenants() {
			fmt.Fprintf(tw, "  %s\t%5.1f%%\t%s\t%s\t%d\t%d\t%s\n", t.GetTenant(), t.GetShare()*100, weightText(t.GetWeight()),
				strings.ReplaceAll(t.GetState(), "_", " "), t.GetInFlight(), t.GetHeld(), yesNo(t.GetBacklogged()))
		}
	}
	return tw.Flush()
}

// figure shows a ratio in [0, 1], or "—" for unknown (negative).
func figure(v float64) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

func weightText(w float64) string {
	if w == 0 {
		return "lane's"
	}
	return fmt.Sprintf("%g", w)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// ceilingsText describes a tenant's hard ceilings.
func ceilingsText(l *adminv1.TenantLimits) string {
	var parts []string
	if r := l.GetMaxDrainRate(); r > 0 {
		parts = append(parts, fmt.Sprintf("at most %g jobs/s (burst %d)", r, l.GetMaxDrainBurst()))
	}
	if n := l.GetMaxInFlight(); n > 0 {
		parts = append(parts, fmt.Sprintf("at most %d in flight", n))
	}
	if len(parts) == 0 {
		return "none beyond the drainers' concurrency"
	}
	return strings.Join(parts, ", ")
}
