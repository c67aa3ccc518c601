package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func (a *app) startCmd() *cobra.Command {
	var (
		req                api.StartProcessRequest
		env, unsetEnv      []string
		timeout, waitLimit time.Duration
		waitPort           int
		waitLog            string
	)
	cmd := &cobra.Command{
		Use:   "start NAME [flags] -- COMMAND [ARG...]",
		Short: "Start a background process in a sandbox",
		Long: `Start a long-running process (a dev server, a watcher, a build) in a sandbox
and print its id at once. Its output is kept (the last 1 MiB of stdout and
of stderr) for 'berth logs'; list processes with 'berth ps' and stop them
with 'berth kill'.

The command runs with /bin/sh -c. A single argument after -- is taken as a
shell command line (pipes and redirections work); several arguments are
quoted and run as one command.

--wait-port and --wait-log return only once the process is ready (its port
accepts connections, or a line of its output contains the text); if the
process exits first, start fails and says with which code.

Examples:
  berth start dev -- python3 -m http.server 8000
  berth start dev --id web --cwd /home/user/app -- 'npm run dev > /tmp/dev.log 2>&1'
  berth start dev --wait-port 3000 -- npm run dev
  berth start dev --wait-log 'compiled successfully' --wait-timeout 2m -- npm run dev
  berth start dev --env PORT=8080 --timeout 1h -- ./server`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("start needs a sandbox NAME and a COMMAND: berth start NAME -- COMMAND [ARG...]")
			}
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fmt.Errorf("only the sandbox name may come before --, got %q", args[:dash])
			}
			if len(args) < 2 {
				return errors.New("no command given: berth start NAME -- COMMAND [ARG...]")
			}
			if waitPort != 0 && waitLog != "" {
				return errors.New("give --wait-port or --wait-log, not both")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Command = shellCommand(args[1:])
			req.TimeoutMs = timeout.Milliseconds()
			var err error
			if req.Env, err = parseEnv(env, unsetEnv); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			p, err := c.StartProcess(ctx, args[0], req)
			if err != nil {
				return err
			}
			switch {
			case waitPort != 0:
				_, err = c.WaitForPort(ctx, args[0], p.ID, api.WaitPortRequest{Port: waitPort, Mode: "tcp", TimeoutMs: waitLimit.Milliseconds()})
			case waitLog != "":
				_, err = c.WaitForLog(ctx, args[0], p.ID, api.WaitLogRequest{Pattern: waitLog, TimeoutMs: waitLimit.Milliseconds()})
			}
			if err != nil {
				return fmt.Errorf("process %s started but did not become ready: %w (see: berth logs %s %s)", p.ID, err, args[0], p.ID)
			}
			fmt.Fprintln(a.stdout, p.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.ID, "id", "", "process id (default: generated)")
	f.StringVar(&req.Cwd, "cwd", "", "working directory (default: the user's home)")
	f.StringVar(&req.User, "user", "", "user to run as")
	f.StringVar(&req.SessionID, "session", "", "start from this session's directory and environment")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&unsetEnv, "unset-env", nil, unsetEnvHelp)
	f.DurationVar(&timeout, "timeout", 0, "kill the process after this long (default: never)")
	f.IntVar(&waitPort, "wait-port", 0, "return once this port accepts TCP connections inside the sandbox")
	f.StringVar(&waitLog, "wait-log", "", "return once a line of output contains this text")
	f.DurationVar(&waitLimit, "wait-timeout", 0, "give up waiting after this long (default: no limit)")
	return cmd
}

// shellCommand turns argv into one /bin/sh command line. A single argument
// is used as written, so that 'a | b' works; several are each quoted, so
// that they reach the program exactly as given.
func shellCommand(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	q := make([]string, len(args))
	for i, s := range args {
		q[i] = shellQuote(s)
	}
	return strings.Join(q, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@%+,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (a *app) psCmd() *cobra.Command {
	var (
		session string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "ps NAME",
		Short: "List a sandbox's background processes",
		Long: `List the background processes started with 'berth start' (or the API),
running and ended. EXIT is the exit code once a process has ended ("-" while
it runs, or when its exit status was lost).

Examples:
  berth ps dev
  berth ps dev --session build
  berth ps dev --json | jq -r '.[] | select(.status=="running") | .id'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListProcesses(cmd.Context(), args[0], session)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.ProcessInfo{}
				}
				return printJSON(a.stdout, list)
			}
			now := time.Now()
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPID\tSTATUS\tEXIT\tSTARTED\tCOMMAND")
			for _, p := range list {
				exit := "-"
				if p.ExitCode != nil {
					exit = strconv.Itoa(*p.ExitCode)
					if p.Signal != "" {
						exit += " (" + p.Signal + ")"
					}
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.ID, p.PID, p.Status, exit, humanAgo(p.StartedAt, now), oneLine(p.Command, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only processes of this session")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// oneLine shortens s to one table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (a *app) logsCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs [-f] NAME PROC_ID",
		Short: "Print a background process's output",
		Long: `Print the output a background process has produced: its stdout to stdout
and its stderr to stderr. Only the last 1 MiB of each is kept (set
logBufferBytes when starting it through the API to keep more).

With -f, keep printing new output until the process ends. If the connection
or the sandbox is lost first, logs says so and exits 1.

Examples:
  berth logs dev web
  berth logs -f dev web
  berth logs dev build 2>&1 | tail -20`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if follow {
				_, err := c.StreamProcessLogs(cmd.Context(), args[0], args[1], a.stdout, a.stderr)
				return err
			}
			logs, err := c.ProcessLogs(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if logs.DroppedStdout > 0 || logs.DroppedStderr > 0 {
				fmt.Fprintf(a.stderr, "berth: earlier output was dropped (%s of stdout, %s of stderr)\n", humanBytes(logs.DroppedStdout), humanBytes(logs.DroppedStderr))
			}
			if _, err := a.stdout.Write(logs.Stdout); err != nil {
				return err
			}
			_, err = a.stderr.Write(logs.Stderr)
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow output until the process ends")
	return cmd
}

func (a *app) killCmd() *cobra.Command {
	var (
		opts client.KillOptions
		all  bool
	)
	cmd := &cobra.Command{
		Use:   "kill NAME PROC_ID | kill NAME --all",
		Short: "Stop background processes",
		Long: `Stop a background process and everything it started. The signal (TERM by
default) goes to the whole process tree; whatever is still alive after the
grace period (5s by default) gets SIGKILL. kill returns once the process is
gone and prints its final state. A signal that does not end a process
(USR1, HUP for some servers) is only delivered.

--all stops every running process of the sandbox and prints how many.

Examples:
  berth kill dev web
  berth kill dev web --signal INT --grace 10s
  berth kill dev --all`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) != 1:
				return errors.New("with --all give only the sandbox NAME: berth kill NAME --all")
			case !all && len(args) != 2:
				return errors.New("kill needs a sandbox NAME and a PROC_ID (or --all): berth kill NAME PROC_ID")
			case all && cmd.Flags().Changed("signal"):
				return errors.New("--all always sends TERM, then KILL; --signal applies to one process")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("grace") && opts.Grace == 0 {
				opts.Grace = -1 // --grace 0: SIGKILL at once
			}
			if all {
				n, err := c.KillAllProcesses(cmd.Context(), args[0], opts)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "killed %d process(es)\n", n)
				return nil
			}
			p, err := c.KillProcess(cmd.Context(), args[0], args[1], opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s %s", p.ID, p.Status)
			if p.Signal != "" {
				fmt.Fprintf(a.stdout, " (%s)", p.Signal)
			} else if p.ExitCode != nil {
				fmt.Fprintf(a.stdout, " (exit %d)", *p.ExitCode)
			}
			fmt.Fprintln(a.stdout)
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.Signal, "signal", "", "signal to send: TERM (default), INT, HUP, QUIT, KILL, USR1...")
	cmd.Flags().DurationVar(&opts.Grace, "grace", 0, "time before SIGKILL (default 5s; 0 kills at once)")
	cmd.Flags().BoolVar(&all, "all", false, "stop every running process of the sandbox")
	return cmd
}
