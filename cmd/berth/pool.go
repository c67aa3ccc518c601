package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func (a *app) poolCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "Show the node's warm pools (operator key only)",
		Long: `A warm pool keeps sandboxes of one image started and frozen, so that a
create that matches claims one in milliseconds instead of starting one.
Pools are configured with 'berth serve --pool IMAGE=SIZE[,instance=TYPE]'
(repeatable) or 'pools:' in the operator policy. At claim the sandbox's
name, hostname, env, labels, tenant, limits, egress policy and secrets are
bound; a claimed sandbox is like a cold-started one, and a member is never
handed out twice.

One line per pool:

  READY      members up and frozen / the pool's size (STARTING more)
  CLAIMS     creates served from the pool; MISSES matched an empty pool
  REFILLS    members started; FAILURES refills that failed (they back
             off and are retried; the pool is never drained)
  ERROR      the last refill failure, until one succeeds

Examples:
  berth pool
  berth pool --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListPools(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, list)
			}
			return printPools(a.stdout, list.Pools)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func printPools(w io.Writer, pools []api.Pool) error {
	if len(pools) == 0 {
		_, err := fmt.Fprintln(w, "no warm pools (berth serve --pool IMAGE=SIZE)")
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tINSTANCE\tSIZE\tREADY\tSTARTING\tCLAIMS\tMISSES\tREFILLS\tFAILURES\tRATE/MIN\tERROR")
	for _, p := range pools {
		inst := p.Instance
		if inst == "" {
			inst = "any"
		}
		errText := p.LastError
		if p.RetryAt != nil {
			errText += fmt.Sprintf(" (retry in %s)", time.Until(*p.RetryAt).Round(100*time.Millisecond))
		}
		img := p.Image
		if p.Snapshot != "" {
			img += " (snapshot " + p.Snapshot + ")"
		}
		size := "fixed"
		if p.Adaptive != nil {
			size = fmt.Sprintf("adaptive %d-%d", p.Adaptive.Min, p.Adaptive.Max)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%s\n", img, inst, size, p.Ready, p.Size, p.Starting, p.Claims, p.Misses, p.Refills, p.Failures, p.RatePerMin, errText)
	}
	return tw.Flush()
}
