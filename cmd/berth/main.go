package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// exitBerthError is the exit status of `berth exec` when berth itself
// failed (as opposed to the command), following docker's convention so
// scripts can tell "the command exited 1" from "there was no command".
const exitBerthError = 125

// exitCode asks run to exit with a given status without printing anything.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// app is the state shared by all commands: the I/O streams (tests replace
// them) and the global connection flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	url, apiKey    string
	dataDir        string
	idemKey        string
	cli            *client.Client

	// progress throttling (printProgress): the last line and when.
	lastProgress   string
	lastProgressAt time.Time
}

// client builds the API client once, from flags, then the environment,
// then <data>/client.json.
func (a *app) client() (*client.Client, error) {
	if a.cli == nil {
		c, err := client.Load(a.dataDir, a.url, a.apiKey)
		if err != nil {
			return nil, err
		}
		a.cli = c
	}
	return a.cli, nil
}

// run executes the CLI and returns the process exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var ec exitCode
	if errors.As(err, &ec) {
		return int(ec)
	}
	if ctx.Err() != nil && errdefs.Kind(err) == nil && errors.Is(err, context.Canceled) {
		return 130 // interrupted, as a shell reports SIGINT; nothing to explain
	}
	fmt.Fprintf(stderr, "berth: %v\n", err)
	if cmd != nil && cmd.Name() == "exec" {
		return exitBerthError
	}
	return 1
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "berth",
		Short: "Give AI agents their own Linux computers",
		Long: `berth runs named, isolated Linux sandboxes on this host. Ask for a sandbox
by name: if it is running you get it, if not it starts; when idle it goes to
sleep and the next request wakes it with its files intact.

Start the server once (as root), then use the other commands from anywhere
on the host. They find the server through --url/--api-key, else the
BERTH_URL/BERTH_API_KEY environment variables, else <data>/client.json,
which berth serve writes.

Quick start:
  sudo berth serve &                         # listens on 127.0.0.1:7070
  berth image build-base                     # build debian-trixie, once
  berth sandbox create demo                  # create a sandbox
  berth exec demo -- node -v                 # run a command in it
  berth cp ./app.py demo:/home/user/app.py   # copy a file in
  berth sandbox rm demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "berth server URL (default: $BERTH_URL, else from <data>/client.json)")
	pf.StringVar(&a.apiKey, "api-key", "", "API key (default: $BERTH_API_KEY, else from <data>/client.json)")
	pf.StringVar(&a.dataDir, "data", "", "berth data directory (default: $BERTH_DATA, else "+client.DefaultDataDir+")")
	pf.StringVar(&a.idemKey, "idempotency-key", "", "send this Idempotency-Key with mutating calls: a retry returns the first answer instead of repeating the effect")
	root.PersistentPreRun = func(cmd *cobra.Command, args []string) {
		if a.idemKey != "" {
			cmd.SetContext(client.WithIdempotencyKey(cmd.Context(), a.idemKey))
		}
	}
	root.AddCommand(
		a.serveCmd(),
		a.sandboxCmd(),
		a.execCmd(),
		a.cpCmd(),
		a.imageCmd(),
		a.snapshotCmd(),
		a.volumeCmd(),
		a.forkCmd(),
		a.backupCmd(),
		a.startCmd(),
		a.psCmd(),
		a.logsCmd(),
		a.killCmd(),
		a.shellCmd(),
		a.watchCmd(),
		a.gitCmd(),
		a.exposeCmd(),
		a.unexposeCmd(),
		a.portsCmd(),
		a.benchCmd(),
		a.runCodeCmd(),
		a.egressCmd(),
		a.secretCmd(),
		a.journalCmd(),
		a.eventsCmd(),
		a.policyCmd(),
		a.callCmd(),
		a.nodeCmd(),
		a.poolCmd(),
		a.topCmd(),
		a.mcpCmd(),
	)
	return root
}
