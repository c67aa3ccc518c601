package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/bench"
	"github.com/berth-sh/berth/client"
)

// runBench and runClusterBench are variables so tests can check the flag
// wiring.
var (
	runBench        = bench.Run
	runClusterBench = bench.RunCluster
	runTaskBench    = bench.RunTask
	runIdleBench    = bench.RunIdle
)

func (a *app) benchCmd() *cobra.Command {
	var o bench.Options
	var members []string
	var single string
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
  berth bench --n 10 --burst 100     # also: 100 sandboxes at once, then their idle footprint
  berth bench --n 50 --burst 100 --pool standard-3   # with berth serve --pool debian-trixie=100,instance=standard-3
  berth bench --n 5 --burst 100 --pool standard-3 --pool-burst 1000   # and 1,000 at once against that pool of 100
  berth bench --idle 1000 --daemon-pid P --sandbox-cgroup /sys/fs/cgroup/cpuacct/berth   # 1,000 lite sandboxes idle at once: MiB per sandbox

With --cluster it measures a cluster instead, through the API URLs of its
members (the same API key for all): exec through the member that runs the
sandbox and through another (interleaved; the cross-node cost is their
p50 difference), time to interactive when placement chose the member the
create was sent to and when it chose another, and creates per second with
--burst creates at once spread over the members (default 3 per member).
Default instance there: lite. With --single URL (a berth serve that is
not in a cluster, same API key) each figure is also measured there in the
same run, interleaved, as the single-host baseline: cross-node exec minus
single-host exec, cross-node TTI over single-host TTI, creates/s on one
host.

  berth bench --cluster http://127.0.0.1:7110,http://127.0.0.1:7120,http://127.0.0.1:7130 --n 30
  berth bench --cluster http://127.0.0.1:7110,http://127.0.0.1:7120 --single http://127.0.0.1:7070 --n 30

With --task it measures instead what a user waits for: "my app is
ready". It generates, offline and always the same for the same sizes, a
Node project with a few thousand files in node_modules (--node-packages
× --files-per-package) and a dev server (server.js, an http server that
requires the packages), plus Python packages for a venv
(--py-packages), all in one tar.gz that it uploads (no network). Each
sample is timed from its request to three points, reported separately:

  shell  an exec of 'echo' through /bin/sh answered
  deps   every file of node_modules and of the venv's site-packages is
         there and the venv's python imports all its packages (from zero
         and from the pool: upload the tarball, unpack it, python3 -m venv)
  app    GET through the dev server's preview URL (berth's preview proxy)
         answered 200 with the body only a complete node_modules computes

in four scenarios, --n samples each (default 5):

  from zero        create, upload + unpack the deps, start the server
  from a snapshot  create from a snapshot of a ready workspace (the first
                   sample is also shown alone: the first restore on this
                   host), start the server
  wake after sleep sleep the ready workspace (untimed); the first exec
                   wakes it; start the server again
  from the pool    a create that claims a warm pool member, then as from
                   zero (pools hold images, not snapshots: the report says
                   what the pool saves). Needs a pool whose instance type
                   differs from --instance (--pool TYPE; found by itself
                   when the daemon keeps exactly one pool of the image)

The target: from the pool and from a snapshot, app ready ≤ 1/5 of from
zero. When a Docker engine answers, the same steps run with docker run,
docker commit + run and docker stop + start of an image imported from
berth's base layer (needs root and the data dir), and each berth scenario
is reported as a ratio to Docker's.

  berth bench --task
  berth bench --task --n 10 --json > task.json
  berth bench --task --instance standard-2 --pool standard-3   # with berth serve --pool debian-trixie=4,instance=standard-3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Logf = func(format string, args ...any) { fmt.Fprintf(a.stderr, format+"\n", args...) }
			if len(members) > 0 {
				if o.Task {
					return fmt.Errorf("--task measures one host; it does not take --cluster")
				}
				if len(members) < 2 {
					return fmt.Errorf("--cluster needs the API URLs of at least two members, got %d", len(members))
				}
				var nodes []*client.Client
				for _, u := range members {
					c, err := client.Load(a.dataDir, u, a.apiKey)
					if err != nil {
						return err
					}
					nodes = append(nodes, c)
				}
				var alone *client.Client
				if single != "" {
					c, err := client.Load(a.dataDir, single, a.apiKey)
					if err != nil {
						return err
					}
					alone = c
				}
				return runClusterBench(cmd.Context(), nodes, alone, o, a.stdout)
			}
			if single != "" {
				return fmt.Errorf("--single is the single-host baseline of a --cluster run")
			}
			if o.Idle > 0 && (o.Task || o.Snapshots || o.Burst > 0 || o.PoolInstance != "") {
				return fmt.Errorf("--idle is a benchmark of its own: it does not take --task, --snapshots, --burst or --pool")
			}
			if o.Task && (o.Snapshots || o.Burst > 0) {
				return fmt.Errorf("--task is a benchmark of its own: it does not take --snapshots or --burst")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			o.DataDir = client.DataDir(a.dataDir)
			if o.Runtime == "" {
				o.Runtime = besideOrPath("runc")
			}
			o.Logf = func(format string, args ...any) { fmt.Fprintf(a.stderr, format+"\n", args...) }
			if o.Idle > 0 {
				return runIdleBench(cmd.Context(), c, o, a.stdout)
			}
			if o.Task {
				if !cmd.Flags().Changed("n") {
					o.N = 5
				}
				return runTaskBench(cmd.Context(), c, o, a.stdout)
			}
			return runBench(cmd.Context(), c, o, a.stdout)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&members, "cluster", nil, "measure a cluster through these members' API URLs (comma-separated, at least two; the API key from --api-key)")
	f.StringVar(&single, "single", "", "with --cluster: the API URL of a berth serve outside the cluster (same API key), measured in the same run as the single-host baseline")
	f.IntVar(&o.N, "n", 50, "samples per figure")
	f.BoolVar(&o.JSON, "json", false, "print one JSON report instead of a table")
	f.BoolVar(&o.Snapshots, "snapshots", false, "add the snapshot scenario: snapshot, restore and fork-10 of a 200 MB / 10k-file workspace, beside tar | zstd")
	f.BoolVar(&o.SleepTiers, "sleep-tiers", false, "add the sleep-tier scenario: -n rounds of sleep → wake → first exec on a freeze-tier and a stop-tier sandbox, reporting freeze and thaw (the daemon's freezer times) beside the stop tier's sleep and wake")
	f.IntVar(&o.Burst, "burst", 0, "add the burst scenario: create this many sandboxes at once, time each to its first node -v, then measure agent RSS and host memory while all run idle")
	f.StringVar(&o.Image, "image", "", "image to measure (default debian-trixie)")
	f.StringVar(&o.Instance, "instance", "", "instance type to measure (default standard-2)")
	f.StringVar(&o.Isolation, "isolation", "", "isolation of the measured sandboxes: runc (default) or gvisor")
	f.StringVar(&o.PoolInstance, "pool", "", "add the warm-pool scenario: TTI of creates that claim a member of the daemon's pool of --image with this instance type (start it with 'berth serve --pool debian-trixie=100,instance=TYPE', a type other than --instance so the cold figures stay cold), and with --burst or --pool-burst N, N creates at once from a pool as full as it gets")
	f.IntVar(&o.PoolBurst, "pool-burst", 0, "with --pool: creates at once in the warm-pool scenario (default --burst); past the pool's size the excess starts cold, waits for a start slot or is answered 429 with Retry-After (berth serve --start-limit, --start-queue, --start-wait), and the report counts the answers by status and looks for half-made sandboxes")
	f.IntVar(&o.DaemonPid, "daemon-pid", 0, "pid of the berth serve measured (same host): adds its own CPU time, with the runc commands it ran, to the CPU figures (host-wide CPU is always reported)")
	f.StringVar(&o.SandboxCgroup, "sandbox-cgroup", "", "cgroup dir above the measured daemon's sandboxes (/sys/fs/cgroup/<run-dir base name>, or /sys/fs/cgroup/cpuacct/<name> on cgroup v1): adds their CPU time to the CPU figures")
	f.BoolVar(&o.Task, "task", false, "run the task benchmark instead: time to shell, deps present and the dev server answering through its preview URL, from zero, a snapshot, a wake and the pool (see above)")
	f.BoolVar(&o.NoDocker, "no-docker", false, "with --task: skip the Docker baseline even when an engine answers")
	f.IntVar(&o.Workspace.NodePackages, "node-packages", 0, "with --task: packages in the generated node_modules (default 160)")
	f.IntVar(&o.Workspace.FilesPerPackage, "files-per-package", 0, "with --task: files per node package, at least 5 (default 20)")
	f.IntVar(&o.Workspace.PyPackages, "py-packages", 0, "with --task: Python packages in the generated venv (default 30)")
	f.IntVar(&o.Idle, "idle", 0, "run the idle scenario instead: create this many sandboxes (--instance, default lite) --idle-parallel at a time, hold them idle together and report host MiB per sandbox (MemAvailable drop, and with --sandbox-cgroup their cgroups' memory and tasks), the daemon's RSS and open files (--daemon-pid), CPU while idle, exec in a random sample, and the destroy")
	f.IntVar(&o.IdleParallel, "idle-parallel", 4, "with --idle: creates in flight at once (a 429 with Retry-After is waited out and retried)")
	f.DurationVar(&o.IdleWindow, "idle-window", 30*time.Second, "with --idle: how long all sandboxes idle while CPU is measured")
	f.IntVar(&o.IdleSample, "idle-sample", 20, "with --idle: random sandboxes that must answer an exec")
	f.IntVar(&o.IdleMinAvailMiB, "idle-min-available", 2048, "with --idle: stop creating once the host's MemAvailable falls under this many MiB")
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
