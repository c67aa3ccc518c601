package main

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/node/local"
)

func (a *app) sandboxCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sb"},
		Short:   "Create, list, inspect, sleep and remove sandboxes",
		Long: `A sandbox is a named Linux computer. Its name (1-63 characters of a-z, 0-9
and '-') is its identity: create it once, then exec into it, copy files in
and out, let it sleep when idle. Its files survive sleep; they are deleted
only by 'berth sandbox rm'.`,
	}
	cmd.AddCommand(a.sandboxCreateCmd(), a.sandboxLsCmd(), a.sandboxGetCmd(), a.sandboxRmCmd(), a.sandboxSleepCmd())
	return cmd
}

func (a *app) sandboxCreateCmd() *cobra.Command {
	var (
		req                api.CreateSandboxRequest
		res                api.Resources
		env, labels        []string
		volumes            []string
		unsetEnv           []string
		internet, keepLive bool
		getOrCreate        bool
		pf                 policyFlags
		sf                 startFlags
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a sandbox (or get it, with --get)",
		Long: `Create a sandbox and print it as JSON once it is running.

Without --get, creating a name that exists is an error. With --get, an
existing sandbox is returned instead (and woken if it sleeps), which makes
the command safe to repeat: it is how an agent says "give me my computer".

Size it with --instance (lite, basic, standard-1 … standard-4) or with a
custom --vcpu/--memory-mib/--disk-mb. It sleeps after --sleep-after of
inactivity unless --keep-alive is set. It has no internet access unless
--internet is set.

With --snapshot ID, a new sandbox starts with the files of that snapshot
(over the snapshot's own base image). With --persist disk, every sleep also
snapshots the sandbox's files to the blob store, so they survive the loss
of this host's disk.

Examples:
  berth sandbox create demo
  berth sandbox create agent-47 --get --instance standard-1 --internet
  berth sandbox create ci-1 --image node --env NODE_ENV=test --label team=ci
  berth sandbox create big --vcpu 2 --memory-mib 4096 --disk-mb 20000
  berth sandbox create dev-2 --snapshot snap_3f9a0c1e --persist disk
  berth sandbox create worker --volume data:/data --volume models:/models:ro
  berth sandbox create web --image my-app --start image --ready-port 8080
  berth sandbox create dev --start 'npm run dev' --ready-log 'ready in'
  berth sandbox create job-7 --persist interval --persist-every 5m   # a node's loss costs at most 5 min of files
  berth sandbox create agent-9 --allow api.github.com --allow '*.pypi.org' \
    --inject 'host=api.github.com,header=Authorization,secret=github,prefix=Bearer'

--allow, --deny and --inject set its network policy (see 'berth egress'):
without --internet only allowed hosts are reachable; secrets named by
--inject stay on the host ('berth secret set').

--start runs a start command at every boot from files: "image" for the
image's own ENTRYPOINT and CMD, or a shell command. It is the background
process "start" ('berth process logs NAME start'). With --ready-port or
--ready-log the create answers once the command is ready, and fails (the
sandbox keeps running) if it exits first or --ready-timeout passes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			var err error
			if req.Env, err = parseEnv(env, unsetEnv); err != nil {
				return err
			}
			if req.Labels, err = parseKV("label", labels); err != nil {
				return err
			}
			if req.Volumes, err = parseVolumeFlags(volumes); err != nil {
				return err
			}
			if req.Start, err = sf.command(); err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("vcpu") || f.Changed("memory-mib") || f.Changed("disk-mb") {
				req.Resources = &res
			}
			if f.Changed("internet") {
				req.Internet = &internet
			}
			if f.Changed("keep-alive") {
				req.KeepAlive = &keepLive
			}
			if pf.set() {
				p, err := pf.policy(internet)
				if err != nil {
					return err
				}
				req.Network = &p
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var sb api.Sandbox
			if getOrCreate {
				sb, _, err = c.GetOrCreate(cmd.Context(), req)
			} else {
				sb, err = c.Create(cmd.Context(), req)
			}
			if err != nil {
				return err
			}
			return printJSON(a.stdout, sb)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Image, "image", "", "image name, reference or digest (default debian-trixie)")
	f.StringVar(&req.Instance, "instance", "", "instance type: lite, basic, standard-1..4 (default "+local.DefaultInstance+")")
	f.Float64Var(&res.VCPU, "vcpu", 0, "custom vCPUs (may be fractional, e.g. 0.5)")
	f.Int64Var(&res.MemoryMiB, "memory-mib", 0, "custom memory in MiB")
	f.Int64Var(&res.DiskMB, "disk-mb", 0, "custom disk in MB")
	f.BoolVar(&internet, "internet", false, "allow outbound internet access")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE for every command (repeatable)")
	f.StringArrayVar(&unsetEnv, "unset-env", nil, "unset this image environment variable for every command (repeatable; sent as null)")
	f.StringArrayVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	f.StringVar(&req.SleepAfter, "sleep-after", "", "sleep after this much inactivity, e.g. 10m (default 10m)")
	f.BoolVar(&keepLive, "keep-alive", false, "never sleep for inactivity")
	f.BoolVar(&getOrCreate, "get", false, "return the sandbox if it exists instead of failing")
	f.StringVar(&req.Snapshot, "snapshot", "", "start from this snapshot's files (see 'berth snapshot ls')")
	f.StringArrayVar(&volumes, "volume", nil, "mount a named volume, NAME:PATH or NAME:PATH:ro (repeatable; see 'berth volume')")
	f.StringVar(&req.Isolation, "isolation", "", "runc (default) or gvisor: gVisor's user-space kernel between the sandbox and the host")
	pf.register(cmd)
	sf.register(cmd)
	f.StringVar(&req.Persist, "persist", "", "none, disk or interval: with disk, each sleep also snapshots its files to the blob store; interval also checkpoints them every --persist-every while it runs (default none; disk in a cluster)")
	f.StringVar(&req.Sleep, "sleep", "", "freeze, checkpoint or stop: what a sleep keeps; freeze keeps memory and processes (a wake continues them), stop keeps files only (default: the server's --sleep-mode)")
	f.StringVar(&req.PersistEvery, "persist-every", "", "with --persist interval: the checkpoint period (10s to 24h, like 10m)")
	return cmd
}

func (a *app) sandboxLsCmd() *cobra.Command {
	var (
		state  string
		labels []string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Long: `List sandboxes, optionally only those in one state and carrying all the
given labels. NODE is the node that runs (or last ran) each one; on a single
host, the host's node name (see 'berth node ls').

Examples:
  berth sandbox ls
  berth sandbox ls --state running
  berth sandbox ls --label team=ci --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lm, err := parseKV("label", labels)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context(), state, lm)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.Sandbox{}
				}
				return printJSON(a.stdout, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tIMAGE\tINSTANCE\tNODE\tIP\tLAST ACTIVE")
			now := time.Now()
			for _, sb := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.Name, sb.State, orDash(sb.Image), orDash(sb.Instance), orDash(sb.Node), orDash(sb.IP), humanAgo(sb.LastActive, now))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only sandboxes in this state: starting, running, sleeping, failed")
	f.StringArrayVar(&labels, "label", nil, "only sandboxes with label KEY=VALUE (repeatable; all must match)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) sandboxGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Print one sandbox as JSON",
		Long: `Print a sandbox's full record as JSON: state, image and digest, resources,
IP address, timestamps, and why it failed if it did.

Example:
  berth sandbox get demo`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			sb, err := c.Get(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(a.stdout, sb)
		},
	}
}

func (a *app) sandboxRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove", "destroy"},
		Short:   "Destroy sandboxes and delete their files",
		Long: `Destroy sandboxes: stop their processes and delete their files. This cannot
be undone. Each name is attempted even if an earlier one fails.

Example:
  berth sandbox rm demo agent-47`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.removeEach(args, func(name string) error { return c.Destroy(cmd.Context(), name) })
		},
	}
}

func (a *app) sandboxSleepCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sleep NAME",
		Short: "Put a sandbox to sleep now",
		Long: `Stop a sandbox's processes now, keeping its files. The next exec, file
operation or 'sandbox create --get' wakes it.

Example:
  berth sandbox sleep demo`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.Sleep(cmd.Context(), args[0])
		},
	}
}

// startFlags are create's start command flags.
type startFlags struct {
	start        string
	readyPort    int
	readyLog     string
	readyTimeout time.Duration
}

func (sf *startFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&sf.start, "start", "", `start command run at every boot from files: "image" (the image's ENTRYPOINT and CMD) or a shell command`)
	f.IntVar(&sf.readyPort, "ready-port", 0, "with --start: wait until this port answers HTTP inside the sandbox")
	f.StringVar(&sf.readyLog, "ready-log", "", "with --start: wait until a line of its output contains this text")
	f.DurationVar(&sf.readyTimeout, "ready-timeout", 0, "with --ready-port or --ready-log: how long to wait (default 60s)")
}

// command is the request's start command; nil without --start.
func (sf *startFlags) command() (*api.StartCommand, error) {
	ready := sf.readyPort != 0 || sf.readyLog != ""
	switch {
	case sf.start == "" && (ready || sf.readyTimeout != 0):
		return nil, errors.New("--ready-port, --ready-log and --ready-timeout need --start")
	case sf.start == "":
		return nil, nil
	case sf.readyPort != 0 && sf.readyLog != "":
		return nil, errors.New("give --ready-port or --ready-log, not both")
	case sf.readyTimeout != 0 && !ready:
		return nil, errors.New("--ready-timeout needs --ready-port or --ready-log")
	}
	s := &api.StartCommand{Command: sf.start}
	if sf.start == "image" {
		s = &api.StartCommand{Image: true}
	}
	ms := sf.readyTimeout.Milliseconds()
	switch {
	case sf.readyPort != 0:
		s.Ready = &api.Readiness{Port: &api.WaitPortRequest{Port: sf.readyPort, TimeoutMs: ms}}
	case sf.readyLog != "":
		s.Ready = &api.Readiness{Log: &api.WaitLogRequest{Pattern: sf.readyLog, TimeoutMs: ms}}
	}
	return s, nil
}
