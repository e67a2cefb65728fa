package ctl

import (
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
	"github.com/sluice-dev/sluice/internal/flagconf"
)

// setupTop is `sluicectl top`: the drainers' fairness view, refreshed
// every --interval until Ctrl-C, or once.
func setupTop(fs *flag.FlagSet) runFunc {
	var tenants int
	var interval time.Duration
	var once bool
	return adminCommand(func(fs *flag.FlagSet) {
		fs.IntVar(&tenants, "top", 10, "tenants shown per lane (1-1000)")
		flagconf.DurationVar(fs, &interval, "interval", 2*time.Second, "time between refreshes")
		fs.BoolVar(&once, "once", false, "print one view and exit")
	}, func(c *admin, _ *env, args []string) error {
		if err := wantArgs(args, 0, "top takes no arguments"); err != nil {
			return err
		}
		if tenants < 1 || tenants > 1000 {
			return fmt.Errorf("--top %d: give 1 to 1000 tenants per lane", tenants)
		}
		if interval < 100*time.Millisecond {
			return fmt.Errorf("--interval %s: give at least 100ms", interval)
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			ctx, cancel := c.call()
			resp, err := c.client.GetFairness(ctx, &adminv1.GetFairnessRequest{Top: int32(tenants)})
			cancel()
			if err != nil {
				return c.explainFairness(err)
			}
			if c.json {
				err = printJSON(c.out, resp)
			} else {
				err = printFairness(c, resp)
			}
			if err != nil || once {
				return err
			}
			select {
			case <-c.ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})(fs)
}

// explainFairness is explain for GetFairness, which answers UNAVAILABLE
// itself where no drainer runs: when the API answers another call, that
// is what its message says, not a connection failure (found in review).
func (c *admin) explainFairness(err error) error {
	st := status.Convert(err)
	if st.Code() == codes.Unavailable {
		ctx, cancel := c.call()
		_, probe := c.client.GetQueueStats(ctx, &adminv1.GetQueueStatsRequest{})
		cancel()
		if probe == nil {
			return fmt.Errorf("the admin API at %s has no fairness figures: %s", c.addr, st.Message())
		}
	}
	return c.explain(err)
}

func printFairness(c *admin, resp *adminv1.GetFairnessResponse) error {
	fmt.Fprintf(c.out, "%s  delivery slots %d, busy %d", time.Now().Format(time.TimeOnly), resp.GetSlots(), resp.GetBusy())
	if resp.GetSlots() == 0 {
		// Pushing drainers always have their --concurrency; pulling ones
		// have the credits of the workers connected.
		fmt.Fprint(c.out, " (no pull worker connected: jobs wait for one)")
	}
	fmt.Fprintln(c.out)
	if len(resp.GetLanes()) == 0 {
		fmt.Fprintln(c.out, "  no work in the last minute")
		return nil
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	for _, l := range resp.GetLanes() {
		fmt.Fprintf(tw, "lane %s\tdeliveries %.1f/s\tutilization %s\tfairness (Jain) %s\theld %d\n", l.GetLane(), l.GetDeliveriesPerSecond(),
			ratio(l.GetUtilization()), ratio(l.GetJainIndex()), l.GetHeld())
		fmt.Fprintln(tw, "  TENANT\tSHARE\tWEIGHT\tSTATE\tIN FLIGHT\tHELD\tWANTS MORE")
		for _, t := range l.GetTenants() {
			fmt.Fprintf(tw, "  %s\t%5.1f%%\t%s\t%s\t%d\t%d\t%s\n", t.GetTenant(), t.GetShare()*100, weightText(t.GetWeight()),
				strings.ReplaceAll(t.GetState(), "_", " "), t.GetInFlight(), t.GetHeld(), yesNo(t.GetBacklogged()))
		}
	}
	return tw.Flush()
}

// ratio shows a figure in [0, 1], or "—" for unknown (negative).
func ratio(v float64) string {
	if v < 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", v)
}

func weightText(w float64) string {
	if w == 0 {
		return "the lane's"
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
