package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func (a *app) backupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Archive a sandbox directory and restore it into any sandbox",
		Long: `A backup is a compressed archive of one directory of a sandbox, kept in
berth's blob store until its TTL runs out (default 72h). Restore it into
the same sandbox or any other, at the same path or another. Unlike a
snapshot it holds only that directory, not the sandbox's whole file system,
and it does not depend on the sandbox's image.

Examples:
  berth backup create dev /home/user/project --exclude node_modules
  berth backup restore bak_5e21c0d4 --sandbox dev-2
  berth backup ls --sandbox dev`,
	}
	cmd.AddCommand(a.backupCreateCmd(), a.backupRestoreCmd(), a.backupLsCmd(), a.backupRmCmd())
	return cmd
}

func (a *app) backupCreateCmd() *cobra.Command {
	var (
		req    api.BackupRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "create SANDBOX DIR",
		Short: "Archive one directory of a sandbox",
		Long: `Archive directory DIR of a sandbox (a relative DIR is taken from the
user's home) into the blob store. Leave paths out with --exclude PATTERN
(repeatable; .gitignore syntax, relative to DIR) and, with --gitignore,
whatever the .gitignore files inside DIR ignore.

Prints the backup's id first, then what it holds:
  bak_5e21c0d4  412 files  3.1 MB  dev:/home/user/project

Examples:
  berth backup create dev /home/user/project
  berth backup create dev project --name before-refactor --ttl 168h
  berth backup create dev /srv/app --exclude node_modules --exclude '*.log' --gitignore`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Dir = args[1]
			c, err := a.client()
			if err != nil {
				return err
			}
			stop := a.waiting("backing up " + args[0] + ":" + args[1])
			b, err := c.CreateBackup(cmd.Context(), args[0], req)
			stop()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, b)
			}
			fmt.Fprintf(a.stdout, "%s  %d files  %s  %s:%s\n", b.ID, b.Files, humanBytes(b.SizeBytes), b.Sandbox, b.Dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Name, "name", "", "name the backup, e.g. before-refactor")
	f.StringVar(&req.TTL, "ttl", "", "keep it this long, 1m to 8760h (default 72h)")
	f.StringArrayVar(&req.Exclude, "exclude", nil, "leave out paths matching this .gitignore-style pattern (repeatable)")
	f.BoolVar(&req.Gitignore, "gitignore", false, "also leave out what .gitignore files ignore")
	f.BoolVar(&asJSON, "json", false, "print the backup as JSON")
	return cmd
}

func (a *app) backupRestoreCmd() *cobra.Command {
	var req api.RestoreBackupRequest
	cmd := &cobra.Command{
		Use:   "restore ID --sandbox SANDBOX [--dir DIR]",
		Short: "Restore a backup into a sandbox",
		Long: `Restore a backup into a sandbox: any sandbox, not only the one it came
from. It goes to --dir, or by default to the directory it was taken from.
The directory is replaced as a whole and atomically: files in it that are
not in the backup are gone afterwards, and a restore that fails leaves it
exactly as it was.

Examples:
  berth backup restore bak_5e21c0d4 --sandbox dev
  berth backup restore bak_5e21c0d4 --sandbox dev-2 --dir /home/user/project-copy`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			stop := a.waiting("restoring " + args[0] + " into " + req.Sandbox)
			res, err := c.RestoreBackup(cmd.Context(), args[0], req)
			stop()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "restored %d files (%s) into %s:%s\n", res.Files, humanBytes(res.Bytes), req.Sandbox, res.Dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Sandbox, "sandbox", "", "sandbox to restore into (required)")
	f.StringVar(&req.Dir, "dir", "", "directory to restore to (default: where the backup was taken from)")
	_ = cmd.MarkFlagRequired("sandbox")
	return cmd
}

func (a *app) backupLsCmd() *cobra.Command {
	var (
		sandbox string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List backups",
		Long: `List backups that have not expired, optionally only those taken from one
sandbox.

Examples:
  berth backup ls
  berth backup ls --sandbox dev --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListBackups(cmd.Context(), sandbox)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.Backup{}
				}
				return printJSON(a.stdout, list)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tDIR\tSIZE\tFILES\tCREATED\tEXPIRES")
			now := time.Now()
			for _, b := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", b.ID, orDash(b.Name), b.Sandbox, b.Dir, humanBytes(b.SizeBytes), b.Files, humanAgo(b.CreatedAt, now), humanIn(b.ExpiresAt, now))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&sandbox, "sandbox", "", "only backups taken from this sandbox")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) backupRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"remove", "delete"},
		Short:   "Delete backups",
		Long: `Delete backups. Each id is attempted even if an earlier one fails.

Example:
  berth backup rm bak_5e21c0d4`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.removeEach(args, func(id string) error { return c.DeleteBackup(cmd.Context(), id) })
		},
	}
}
