package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func (a *app) nodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List the cluster's nodes, and drain or undrain one (operator key only)",
		Long: `Every berth process is a node of its cluster: it writes an entry with what
it offers (CPU, memory, disk), what its sandboxes were given of it, the
images and snapshot layers it holds, its isolation backends and labels,
and heartbeats it every --node-heartbeat (default 2s). A node whose last
heartbeat is older than --node-stale (default 10s) is stale: it takes no
new sandboxes. A single host is a cluster of one node, named after the host
(berth serve --node-name to choose).

Draining a node stops new placements on it and moves its sandboxes off it
(see 'berth node drain --help'). Only the operator's API key may use these commands; a tenant's key is
refused (403).`,
	}
	cmd.AddCommand(a.nodeLsCmd(), a.nodeShowCmd(), a.nodeDrainCmd(true), a.nodeDrainCmd(false))
	return cmd
}

func (a *app) nodeLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List nodes with capacity, load, holdings and health",
		Long: `List the cluster's nodes, one line each:

  HEALTH     alive, or stale when its last heartbeat is older than the bound
  CPU        vCPUs given to running sandboxes / the node's vCPUs
  MEM, DISK  the same for memory and disk (disk counts sleeping sandboxes too)
  SANDBOXES  sandboxes placed on the node, in any state; RUNNING and
             SLEEPING split them (a draining node's progress: both fall
             to 0 as its sandboxes move)
  IMAGES     image digests unpacked there; LAYERS the snapshot layers cached
  HEARTBEAT  how long ago the node last wrote its entry (the store's clock)

--json prints the full entries (digests, layer sizes, labels, epoch).

Examples:
  berth node ls
  berth node ls --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			if list.Nodes == nil {
				list.Nodes = []api.Node{}
			}
			if asJSON {
				return printJSON(a.stdout, list)
			}
			return printNodes(a.stdout, list.Nodes)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// printNodes is node ls's table.
func printNodes(w io.Writer, nodes []api.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tADDR\tROLES\tHEALTH\tCPU\tMEM\tDISK\tSANDBOXES\tRUNNING\tSLEEPING\tIMAGES\tLAYERS\tDRAINING\tHEARTBEAT")
	for _, n := range nodes {
		draining := "no"
		if n.Draining {
			draining = "yes"
		}
		layers := strconv.Itoa(len(n.Layers))
		if len(n.Layers) > 0 {
			layers += " (" + humanBytes(n.LayerBytes) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n",
			n.Name, orDash(n.Addr), orDash(strings.Join(n.Roles, ",")), n.Health,
			cores(n.Committed.MilliCPU)+"/"+cores(n.Capacity.MilliCPU),
			shortBytes(n.Committed.MemoryBytes)+"/"+shortBytes(n.Capacity.MemoryBytes),
			shortBytes(n.Committed.DiskBytes)+"/"+shortBytes(n.Capacity.DiskBytes),
			n.Sandboxes, n.Running, n.Sleeping, len(n.Images), layers, draining, heartbeatAge(n.HeartbeatAgeMs))
	}
	return tw.Flush()
}

// cores renders millicores as vCPUs: 2000 → "2", 250 → "0.25".
func cores(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// shortBytes is humanBytes without the space, for a table cell; 0 is "0"
// (a disk the node cannot tell).
func shortBytes(n int64) string {
	if n == 0 {
		return "0"
	}
	return strings.ReplaceAll(humanBytes(n), " ", "")
}

func heartbeatAge(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s ago"
	}
	return humanAgo(time.Now().Add(-d), time.Now())
}

func (a *app) nodeShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Print one node's entry as JSON",
		Long: `Print a node's full entry as JSON: address, roles, capacity and what is
committed of it, creates in flight, isolation backends, labels, the image
digests and snapshot layers (sha256 → compressed bytes) it holds, the
sandboxes it owns (sandboxes, and of them running and sleeping: a draining
node's progress), draining, its epoch (one per process start), start time, last heartbeat and health.

Example:
  berth node show worker-1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			n, err := c.GetNode(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(a.stdout, n)
		},
	}
}

// nodeDrainCmd is `node drain` (drain) or `node undrain`.
func (a *app) nodeDrainCmd(drain bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drain NAME",
		Short: "Stop new placements on a node and move its sandboxes off it",
		Long: `Mark a node draining. The mark survives the node's heartbeats and restarts
until 'berth node undrain'; draining a draining node changes nothing.

While a node is draining:
  - placement puts no new sandboxes on it;
  - the node puts its running sandboxes to sleep, two at a time, one round
    per heartbeat (--node-heartbeat); in cluster mode each sleep persists
    the sandbox's files to the blob store (S3). Its processes end, as in
    any sleep;
  - a request for one of its sleeping sandboxes, made at any node, moves
    that sandbox first: to the node that got the request when that node
    runs sandboxes, else to the node placement chooses. It wakes there
    from its persisted files, and the drained node removes its copy.
    A running sandbox is served where it runs until the node slept it.
Nothing moves before its next request: a sandbox nobody uses stays
sleeping, owned by the drained node (which need not be up for it to move
later: a dead owner's sandboxes move on their next request too).

A sandbox whose files cannot leave the node stays there, running or
sleeping, and is still served: one created with persist none, or any
sandbox when the cluster has no shared blob store (--s3-endpoint).

Progress: 'berth node ls' (RUNNING, SLEEPING) and 'berth node show NAME'
count the sandboxes the node still owns; the drain is done when both are 0.

Example:
  berth node drain worker-1
  berth node ls`,
		Args: cobra.ExactArgs(1),
	}
	if !drain {
		cmd.Use = "undrain NAME"
		cmd.Short = "Let a drained node take new sandboxes again"
		cmd.Long = `Clear a node's draining mark: placement may put new sandboxes on it again.

Example:
  berth node undrain worker-1`
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.client()
		if err != nil {
			return err
		}
		var n api.Node
		if drain {
			n, err = c.DrainNode(cmd.Context(), args[0])
		} else {
			n, err = c.UndrainNode(cmd.Context(), args[0])
		}
		if err != nil {
			return err
		}
		if n.Draining {
			fmt.Fprintf(a.stdout, "node %s is draining: it takes no new sandboxes\n", n.Name)
			fmt.Fprintf(a.stdout, "it still owns %d running sandboxes (it sleeps them, 2 at a time) and %d sleeping (each moves to another node on its next request)\n", n.Running, n.Sleeping)
		} else {
			fmt.Fprintf(a.stdout, "node %s takes new sandboxes\n", n.Name)
		}
		return nil
	}
	return cmd
}
