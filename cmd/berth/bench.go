package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/bench"
	"github.com/berth-sh/berth/client"
)

// runBench is a variable so tests can check the flag wiring.
var runBench = bench.Run

func (a *app) benchCmd() *cobra.Command {
	var o bench.Options
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure berth against plain runc and docker on this host",
		Long: `Measure, through the public API, the figures berth is built to hit: time
to interactive (create → first 'node -v'), exec round trip and wake from
sleep. Each is reported beside the same operation done with plain tools
in the same run (raw 'runc run', and 'docker run'/'docker exec' when a
Docker engine is running), as a ratio.

It creates sandboxes named bench-* and destroys them afterwards. It needs
a running 'berth serve' and an image (default debian-trixie).

Examples:
  berth bench
  berth bench --n 100 --json > bench.json
  berth bench --n 20 --snapshots
  berth bench --n 10 --burst 100     # also: 100 sandboxes at once, then their idle footprint`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			o.DataDir = client.DataDir(a.dataDir)
			if o.Runtime == "" {
				o.Runtime = besideOrPath("runc")
			}
			o.Logf = func(format string, args ...any) { fmt.Fprintf(a.stderr, format+"\n", args...) }
			return runBench(cmd.Context(), c, o, a.stdout)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.N, "n", 50, "samples per figure")
	f.BoolVar(&o.JSON, "json", false, "print one JSON report instead of a table")
	f.BoolVar(&o.Snapshots, "snapshots", false, "add the snapshot scenario: snapshot, restore and fork-10 of a 200 MB / 10k-file workspace, beside tar | zstd")
	f.IntVar(&o.Burst, "burst", 0, "add the burst scenario: create this many sandboxes at once, time each to its first node -v, then measure agent RSS and host memory while all run idle")
	f.StringVar(&o.Image, "image", "", "image to measure (default debian-trixie)")
	f.StringVar(&o.Instance, "instance", "", "instance type to measure (default standard-2)")
	f.StringVar(&o.Isolation, "isolation", "", "isolation of the measured sandboxes: runc (default) or gvisor")
	f.StringVar(&o.Runtime, "runtime", "", "runc binary for the raw runc baseline (default: runc beside berth, then $PATH)")
	return cmd
}

// besideOrPath finds name next to the berth binary, then on $PATH; "" if
// neither has it.
func besideOrPath(name string) string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	p, _ := exec.LookPath(name)
	return p
}
