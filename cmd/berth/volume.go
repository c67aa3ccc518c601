package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func (a *app) volumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"vol"},
		Short:   "Create, list, snapshot, fork and delete named volumes",
		Long: `A volume is data that lives apart from any sandbox: a btrfs subvolume with a
quota on this host. Mount it when creating a sandbox with
'--volume NAME:PATH' (read-write) or '--volume NAME:PATH:ro'. One sandbox
at a time mounts a volume read-write; any number mount it, or its
snapshots, read-only. The volume stays when every sandbox that used it is
destroyed.

A snapshot is a read-only copy as of now; a fork is a new writable volume
that starts as a copy. Both are copy-on-write: instant whatever the size.

Examples:
  berth volume create data --size 10G
  berth sandbox create a --volume data:/data
  berth volume snapshot data data-monday
  berth sandbox create reader --volume data-monday:/data:ro
  berth volume fork data data-experiment
  berth volume ls
  berth volume rm data-experiment`,
	}
	cmd.AddCommand(a.volumeCreateCmd(), a.volumeLsCmd(), a.volumeGetCmd(), a.volumeRmCmd(), a.volumeSnapshotCmd(), a.volumeForkCmd())
	return cmd
}

func (a *app) volumeCreateCmd() *cobra.Command {
	var size string
	cmd := &cobra.Command{
		Use:   "create NAME [--size 10G]",
		Short: "Create an empty volume",
		Long: `Create an empty volume. --size is its quota (default 1G; at least 16M):
a write past it fails inside the sandbox with "Disk quota exceeded".
Names are 1-63 characters of a-z, 0-9, '.', '_' and '-'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.CreateVolume(cmd.Context(), args[0], n)
			if err != nil {
				return err
			}
			return printJSON(a.stdout, v)
		},
	}
	cmd.Flags().StringVar(&size, "size", "", "quota, e.g. 512M, 10G (default 1G)")
	return cmd
}

func (a *app) volumeLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List volumes",
		Long:    `List volumes and snapshots with their quota, usage and the sandboxes that mount them.`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListVolumes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.Volume{}
				}
				return printJSON(a.stdout, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tUSED\tSIZE\tORIGIN\tWRITER\tREADERS\tCREATED")
			now := time.Now()
			for _, v := range list {
				kind, used := "volume", "-"
				if v.Snapshot {
					kind = "snapshot"
				}
				if v.UsedBytes >= 0 {
					used = humanBytes(v.UsedBytes)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, kind, used, humanBytes(v.SizeBytes), orDash(v.Origin), orDash(v.Writer), orDash(strings.Join(v.Readers, ",")), humanAgo(v.CreatedAt, now))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) volumeGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Print one volume as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.GetVolume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(a.stdout, v)
		},
	}
}

func (a *app) volumeRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete volumes and their data",
		Long: `Delete volumes and their data. A volume a sandbox mounts is refused (destroy
or stop the sandbox first). Snapshots and forks of a volume are
independent and stay. Each name is attempted even if an earlier one fails.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.removeEach(args, func(n string) error { return c.DeleteVolume(cmd.Context(), n) })
		},
	}
}

func (a *app) volumeSnapshotCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot VOLUME NAME",
		Short: "Take a read-only snapshot of a volume",
		Long: `Take a read-only, copy-on-write snapshot of VOLUME named NAME. It sees the
volume's content as of now; mount it with '--volume NAME:PATH:ro'.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.SnapshotVolume(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return printJSON(a.stdout, v)
		},
	}
}

func (a *app) volumeForkCmd() *cobra.Command {
	var size string
	cmd := &cobra.Command{
		Use:   "fork SRC NAME [--size 10G]",
		Short: "Fork a volume or snapshot into a new writable volume",
		Long: `Make NAME, a new writable volume that starts as a copy of SRC (a volume or a
snapshot). Copy-on-write: nothing is copied now, and the two are
independent from then on. --size sets its quota (default SRC's).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseSize(size)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.ForkVolume(cmd.Context(), args[0], args[1], n)
			if err != nil {
				return err
			}
			return printJSON(a.stdout, v)
		},
	}
	cmd.Flags().StringVar(&size, "size", "", "quota, e.g. 512M, 10G (default the source's)")
	return cmd
}

// parseSize reads 1024, 512K, 64M, 10G, 1T (binary units); "" is 0.
func parseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	switch strings.ToUpper(s[len(s)-1:]) {
	case "K":
		mult = 1 << 10
	case "M":
		mult = 1 << 20
	case "G":
		mult = 1 << 30
	case "T":
		mult = 1 << 40
	}
	num := s
	if mult != 1 {
		num = s[:len(s)-1]
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, errdefs.InvalidArgument("size %q: want a positive number with an optional K, M, G or T suffix, like 10G", s)
	}
	return n * mult, nil
}

// parseVolumeFlags reads --volume NAME:PATH[:ro|:rw] flags.
func parseVolumeFlags(vs []string) ([]api.VolumeMount, error) {
	var out []api.VolumeMount
	for _, v := range vs {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, errdefs.InvalidArgument("--volume %q: want NAME:PATH or NAME:PATH:ro", v)
		}
		m := api.VolumeMount{Name: parts[0], Path: parts[1]}
		if len(parts) == 3 {
			switch parts[2] {
			case "ro":
				m.ReadOnly = true
			case "rw":
			default:
				return nil, errdefs.InvalidArgument("--volume %q: the mode is ro or rw, not %q", v, parts[2])
			}
		}
		out = append(out, m)
	}
	return out, nil
}
