package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func (a *app) watchCmd() *cobra.Command {
	var (
		opts        client.WatchOptions
		noRecursive bool
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "watch NAME PATH [--include GLOB]... [--exclude GLOB]...",
		Short: "Print file changes under a path in a sandbox",
		Long: `Watch a file or directory in a sandbox (recursively by default) and print
one line per change, "EVENT PATH", until interrupted. EVENT is create,
modify, delete, move_from, move_to or attrib; directories end in '/'.

Nothing is printed until the watch is in place; from then on every change
is reported. .git and node_modules are skipped unless you give --exclude
(or --exclude ''); --include reports only matching paths. Globs match the
path relative to PATH and each of its components ("*.go", "src/*").
--include and --exclude cannot be combined.

If the watched path is deleted, watch prints why on stderr and exits 0. If
the sandbox is lost, it exits 1.

Examples:
  berth watch dev /home/user/app
  berth watch dev /home/user/app --include '*.go' --include '*.mod'
  berth watch dev /srv --exclude dist --exclude '*.tmp'
  berth watch dev /home/user/app --json | jq -r .path`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Recursive = !noRecursive
			if cmd.Flags().Changed("exclude") && len(nonEmpty(opts.Exclude)) == 0 {
				opts.Exclude, opts.NoDefaultExcludes = nil, true
			}
			opts.Exclude = nonEmpty(opts.Exclude)
			if len(opts.Include) > 0 && len(opts.Exclude) > 0 {
				return fmt.Errorf("give --include or --exclude, not both")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			enc := json.NewEncoder(a.stdout)
			return c.Watch(cmd.Context(), args[0], args[1], opts, func(ev api.WatchEvent) error {
				switch ev.Type {
				case api.WatchWatching:
					fmt.Fprintf(a.stderr, "watching %s\n", args[1])
					return nil
				case api.WatchErrorType:
					if ev.Error != nil {
						fmt.Fprintf(a.stderr, "berth: warning: %s\n", ev.Error.Message)
					}
					return nil
				case api.WatchStopped:
					fmt.Fprintf(a.stderr, "berth: watch stopped: %s\n", orDash(ev.Reason))
					return nil
				}
				if asJSON {
					return enc.Encode(ev)
				}
				p := ev.Path
				if ev.IsDirectory {
					p += "/"
				}
				_, err := fmt.Fprintf(a.stdout, "%-9s %s\n", ev.EventType, p)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&opts.Include, "include", nil, "report only paths matching this glob (repeatable)")
	f.StringArrayVar(&opts.Exclude, "exclude", nil, "skip paths matching this glob (repeatable; default .git, node_modules)")
	f.BoolVar(&noRecursive, "no-recursive", false, "watch only PATH itself, not its subdirectories")
	f.BoolVar(&asJSON, "json", false, "print each event as a JSON line")
	return cmd
}

func nonEmpty(in []string) []string {
	var out []string
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (a *app) gitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "git",
		Short: "Git operations inside a sandbox",
		Long: `Git operations run by the sandbox's agent, inside the sandbox.

Example:
  berth git clone dev https://github.com/user/repo --branch main --depth 1`,
	}
	cmd.AddCommand(a.gitCloneCmd())
	return cmd
}

func (a *app) gitCloneCmd() *cobra.Command {
	var (
		req     api.GitCheckoutRequest
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "clone NAME URL [--branch B] [--depth N] [--dir D]",
		Short: "Clone a repository into a sandbox",
		Long: `Clone a git repository inside a sandbox, as the sandbox's default user,
into ~/<repository name> unless --dir is given. The sandbox needs internet
access for remote URLs (berth sandbox create NAME --internet).

Accepted URLs: https://, http://, git://, ssh://, file:// and user@host:path.
Git never prompts: a private repository without credentials fails with an
authentication error. A missing repository or branch, a network failure and
a non-empty target directory are each reported as such.

Examples:
  berth git clone dev https://github.com/expressjs/express
  berth git clone dev https://github.com/user/repo --branch dev --depth 1 --dir /srv/app`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.URL = args[1]
			req.TimeoutMs = timeout.Milliseconds()
			if req.Depth < 0 {
				return fmt.Errorf("--depth must be positive, got %d", req.Depth)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			stop := a.waiting("cloning " + req.URL)
			res, err := c.GitCheckout(cmd.Context(), args[0], req)
			stop()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "cloned %s (branch %s, commit %s) into %s\n", res.URL, orDash(res.Branch), orDash(shortCommit(res.Commit)), res.TargetDir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Branch, "branch", "", "branch or tag to check out (default: the remote's default)")
	f.IntVar(&req.Depth, "depth", 0, "shallow clone with this many commits (default: full history)")
	f.StringVar(&req.TargetDir, "dir", "", "directory to clone into (default: ~/<repository name>)")
	f.StringVar(&req.User, "user", "", "user to clone as (default: the sandbox's default user)")
	f.DurationVar(&timeout, "timeout", 0, "give up after this long (default 10m)")
	return cmd
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
