package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
)

// maxExecStdin bounds -i input: stdin travels base64-encoded inside the
// JSON exec request, whose body the server caps at 1 MiB.
const maxExecStdin = 700 << 10

func (a *app) execCmd() *cobra.Command {
	var (
		cwd, user, shell string
		env, unsetEnv    []string
		timeout          time.Duration
		stdin            bool
	)
	cmd := &cobra.Command{
		Use:   "exec NAME [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox, streaming its output as it is produced, and
exit with the command's exit status (128+N if it was killed by signal N).
A sleeping sandbox is woken first.

Put -- before the command so that its flags are not taken for berth's.
With -c, the command is one string run by /bin/sh -c instead.

If berth itself fails (no such sandbox, server unreachable, connection lost
before the command finished), exec prints the reason and exits 125, so
scripts can tell berth's failures from the command's.

Examples:
  berth exec demo -- node -v
  berth exec demo --cwd /srv --env DEBUG=1 -- python3 app.py --port 8000
  berth exec demo -c 'ls -la | wc -l'
  echo 'print(6*7)' | berth exec demo -i -- python3
  berth exec demo --timeout 30s -- make test`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("exec needs a sandbox NAME and a COMMAND: berth exec NAME -- COMMAND [ARG...]")
			}
			if dash := cmd.ArgsLenAtDash(); dash > 1 {
				return fmt.Errorf("only the sandbox name may come before --, got %q", args[:dash])
			}
			if shell == "" && len(args) < 2 {
				return errors.New("no command given: berth exec NAME -- COMMAND [ARG...] (or -c 'shell command')")
			}
			if shell != "" && len(args) > 1 {
				return errors.New("give either -c 'shell command' or -- COMMAND [ARG...], not both")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.ExecRequest{Cwd: cwd, User: user, TimeoutMs: timeout.Milliseconds()}
			if shell != "" {
				req.Command = shell
			} else {
				req.Argv = args[1:]
			}
			var err error
			if req.Env, err = parseEnv(env, unsetEnv); err != nil {
				return err
			}
			if stdin {
				b, err := io.ReadAll(io.LimitReader(a.stdin, maxExecStdin+1))
				if err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				if len(b) > maxExecStdin {
					return fmt.Errorf("stdin is larger than %d KiB; upload it with 'berth cp - %s:/tmp/input' and redirect from that file", maxExecStdin>>10, args[0])
				}
				req.Stdin = b
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			st, err := c.ExecStream(cmd.Context(), args[0], req, a.stdout, a.stderr)
			if err != nil {
				return err
			}
			if st.TimedOut {
				fmt.Fprintf(a.stderr, "berth: command timed out after %s and was killed\n", timeout)
			}
			code, err := exitStatus(st)
			if err != nil {
				return err
			}
			if code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cwd, "cwd", "", "working directory (default: the user's home)")
	f.StringVar(&user, "user", "", "user to run as (default: user if the image has it, else root)")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringArrayVar(&unsetEnv, "unset-env", nil, unsetEnvHelp)
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long, e.g. 30s (default: none)")
	f.BoolVarP(&stdin, "interactive", "i", false, "send berth's stdin to the command (up to 700 KiB)")
	f.StringVarP(&shell, "command", "c", "", "run this string with /bin/sh -c")
	return cmd
}

// exitStatus is the process exit status that mirrors st, as a shell would
// report it.
func exitStatus(st api.ExitStatus) (int, error) {
	code := st.ExitCode
	if st.Signal != "" && code < 128 {
		// The API promises 128+signal already; be robust to a server
		// that only filled in the signal name.
		if n := unix.SignalNum(st.Signal); n != 0 {
			code = 128 + int(n)
		}
	}
	if code < 0 || code > 255 {
		// os.Exit(256) would exit 0: never turn a failure into success.
		return 0, fmt.Errorf("command ended with exit status %d, which a process cannot report", code)
	}
	return code, nil
}
