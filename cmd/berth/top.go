package main

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func (a *app) topCmd() *cobra.Command {
	var (
		noStream bool
		every    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "top [NAME...]",
		Short: "Live resource use of running sandboxes, like docker stats",
		Long: `Shows each running sandbox's CPU, memory, disk and network use as the
host samples it every 5 s (its cgroup, its writable layer's quota group
and its veth; nothing is read inside the sandbox), refreshing until
interrupted. With names, only those sandboxes.

  CPU %      over the last sample interval, 100 per core
  CPU s      CPU seconds of the current run (ACTIVE s: wall-clock seconds
             in which it used any CPU)
  MEM        memory now / limit (PEAK: the most since its start)
  DISK       writable layer / quota
  NET TX/RX  bytes the sandbox sent / received this run

Examples:
  berth top
  berth top --no-stream
  berth top web api`,
		RunE: func(cmd *cobra.Command, names []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			for {
				targets := names
				if len(targets) == 0 {
					list, err := c.List(cmd.Context(), api.StateRunning, nil)
					if err != nil {
						return err
					}
					for _, sb := range list {
						targets = append(targets, sb.Name)
					}
					sort.Strings(targets)
				}
				rows := make([]api.SandboxMetrics, 0, len(targets))
				for _, n := range targets {
					m, err := c.SandboxMetrics(cmd.Context(), n)
					if err != nil {
						return err
					}
					rows = append(rows, m)
				}
				if !noStream {
					fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // home and clear, as docker stats does
				}
				if err := printTop(a.stdout, rows); err != nil || noStream {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(every):
				}
			}
		},
	}
	cmd.Flags().BoolVar(&noStream, "no-stream", false, "print one table and exit")
	cmd.Flags().DurationVar(&every, "interval", 5*time.Second, "refresh interval")
	return cmd
}

func printTop(w io.Writer, rows []api.SandboxMetrics) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCPU %\tCPU s\tACTIVE s\tMEM / LIMIT\tPEAK\tDISK / QUOTA\tNET TX / RX")
	for _, m := range rows {
		s := m.Current
		if s == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\n", m.Name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.0f\t%s / %s\t%s\t%s / %s\t%s / %s\n", m.Name, s.CPUPercent, s.CPUSeconds, s.ActiveCPUSeconds,
			size(s.MemoryBytes), size(s.MemoryLimitBytes), size(s.MemoryPeakBytes), size(s.DiskUsedBytes), size(s.DiskQuotaBytes),
			size(s.NetTxBytes), size(s.NetRxBytes))
	}
	return tw.Flush()
}

// size is n bytes in binary units ("-" for 0: unknown or none).
func size(n int64) string {
	if n <= 0 {
		return "-"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	d, e := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		d *= unit
		e++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(d), "KMGTPE"[e])
}
