package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func (a *app) snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snap"},
		Short:   "Take, list, inspect and delete snapshots of sandboxes",
		Long: `A snapshot is an immutable copy of a sandbox's files (what it changed over
its image), taken while the sandbox is frozen for a moment. Start new
sandboxes from it with 'berth sandbox create NAME --snapshot ID', or make
several at once with 'berth fork'. A snapshot expires after its TTL
(default 30 days), renewed each time a sandbox starts from it.

Typical use: set a sandbox up once (clone, install dependencies), snapshot
it, and start every later sandbox from the snapshot instead of repeating
the setup.

Examples:
  berth snapshot create dev --name deps-installed
  berth sandbox create dev-2 --snapshot snap_3f9a0c1e
  berth snapshot ls --sandbox dev`,
	}
	cmd.AddCommand(a.snapshotCreateCmd(), a.snapshotLsCmd(), a.snapshotGetCmd(), a.snapshotRmCmd())
	return cmd
}

func (a *app) snapshotCreateCmd() *cobra.Command {
	var (
		req    api.SnapshotRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "create SANDBOX",
		Short: "Snapshot a sandbox's files",
		Long: `Snapshot a sandbox's files. The sandbox is frozen while its changes are
captured (the line printed says for how long) and then carries on; its
processes are not restarted. A sleeping sandbox is snapshotted as it is.

Prints the snapshot's id first, then its size and the freeze time:
  snap_3f9a0c1e  12.4 MB  frozen 38.1 ms

--name labels the snapshot (1-128 characters of a-z, 0-9, '.', '_', '-');
--ttl sets how long it is kept, from 1m to 8760h (default 720h).

Examples:
  berth snapshot create dev
  berth snapshot create dev --name deps-installed --ttl 72h
  ID=$(berth snapshot create dev | cut -d' ' -f1)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			stop := a.waiting("snapshotting " + args[0])
			s, err := c.Snapshot(cmd.Context(), args[0], req)
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, s)
			}
			fmt.Fprintf(a.stdout, "%s  %s  frozen %.1f ms\n", s.ID, humanBytes(s.SizeBytes), s.FreezeMs)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "name the snapshot, e.g. deps-installed")
	f.StringVar(&req.TTL, "ttl", "", "keep it this long, e.g. 72h (default 720h)")
	f.BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	return cmd
}

func (a *app) snapshotLsCmd() *cobra.Command {
	var (
		sandbox, name string
		asJSON        bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List snapshots",
		Long: `List snapshots that have not expired, optionally only those of one sandbox
or with one name. PARENT is the snapshot the sandbox had started from, if
any: snapshots of a restored sandbox are stacked on their parent.

Examples:
  berth snapshot ls
  berth snapshot ls --sandbox dev
  berth snapshot ls --name deps-installed --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListSnapshots(cmd.Context(), sandbox, name)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.Snapshot{}
				}
				return printJSON(a.stdout, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tSIZE\tPARENT\tCREATED\tEXPIRES")
			now := time.Now()
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, orDash(s.Name), s.Sandbox, humanBytes(s.SizeBytes), orDash(s.Parent), humanAgo(s.CreatedAt, now), humanIn(s.ExpiresAt, now))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&sandbox, "sandbox", "", "only snapshots of this sandbox")
	f.StringVar(&name, "name", "", "only snapshots with this name")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) snapshotGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Print one snapshot as JSON",
		Long: `Print a snapshot's full record as JSON: sandbox, sizes, file count, sha256,
base image digest, parent, depth, freeze time, creation and expiry.

Example:
  berth snapshot get snap_3f9a0c1e`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.GetSnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(a.stdout, s)
		},
	}
}

func (a *app) snapshotRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete snapshots",
		Long: `Delete snapshots. Sandboxes already started from one keep working. Each id
is attempted even if an earlier one fails.

Example:
  berth snapshot rm snap_3f9a0c1e snap_77d01b2a`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.removeEach(args, func(id string) error { return c.DeleteSnapshot(cmd.Context(), id) })
		},
	}
}

func (a *app) forkCmd() *cobra.Command {
	var (
		req    api.ForkRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "fork SRC --count N [--name NAME]...",
		Short: "Make N new sandboxes from one snapshot of a sandbox",
		Long: `Snapshot sandbox SRC once and start N new sandboxes from that snapshot.
The forks share the snapshot's files (nothing is copied per fork) and each
gets its own writable layer, so they diverge from there. SRC keeps running.

Forks are named SRC-fork-1 … SRC-fork-N unless you give one --name per
fork (then --count may be left out). Up to 100 forks at a time.

Prints the new sandboxes' names on stdout, one per line, and the shared
snapshot's id on stderr (--json prints both as JSON).

Examples:
  berth fork dev --count 3
  berth fork dev --name try-a --name try-b
  for sb in $(berth fork dev --count 4); do berth exec "$sb" -- make test & done`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("count") {
				req.Count = len(req.Names)
			}
			if req.Count == 0 {
				return errors.New("say how many forks: --count N, or one --name per fork")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			stop := a.waiting(fmt.Sprintf("forking %s into %d", args[0], req.Count))
			res, err := c.Fork(cmd.Context(), args[0], req)
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, res)
			}
			for _, sb := range res.Sandboxes {
				fmt.Fprintln(a.stdout, sb.Name)
			}
			fmt.Fprintf(a.stderr, "forked %s into %d sandboxes from snapshot %s\n", args[0], len(res.Sandboxes), res.Snapshot.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&req.Count, "count", 0, "how many forks (1-100)")
	f.StringArrayVar(&req.Names, "name", nil, "name of a fork (repeat once per fork)")
	f.BoolVar(&asJSON, "json", false, "print the snapshot and the new sandboxes as JSON")
	return cmd
}
