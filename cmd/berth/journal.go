package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/policy"
)

func (a *app) journalCmd() *cobra.Command {
	var asJSON, object bool
	cmd := &cobra.Command{
		Use:   "journal NAME | --object CLASS/ID",
		Short: "Show a sandbox controller's journal (operations, idempotency keys, redacted args, results)",
		Example: `  berth journal my-agent
  berth journal --object AgentSandbox/ws1   # a durable object's journal (its container's)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var es []api.JournalEntry
			if object {
				class, id, ok := strings.Cut(args[0], "/")
				if !ok || class == "" || id == "" {
					return fmt.Errorf("--object wants CLASS/ID, got %q", args[0])
				}
				es, err = c.ObjectJournal(cmd.Context(), class, id)
			} else {
				es, err = c.Journal(cmd.Context(), args[0])
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, es)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tAT\tOP\tSTATUS\tTOOK\tKEY\tARGS\tERROR")
			for _, e := range es {
				took := ""
				if e.FinishedAt != nil {
					took = e.FinishedAt.Sub(e.At).Round(time.Millisecond).String()
				}
				args := string(e.Args)
				if args == "" {
					args = e.Detail
				}
				if len(args) > 60 {
					args = args[:57] + "..."
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.At.Local().Format("15:04:05.000"), e.Op, e.Status, took, e.Key, args, e.Error)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the entries as JSON")
	cmd.Flags().BoolVar(&object, "object", false, "NAME is a durable object CLASS/ID")
	return cmd
}

func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Operator policy files"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy file and explain every error with its line number",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			p, err := policy.Parse(b)
			if err != nil {
				var ps policy.Problems
				if pe, ok := err.(policy.Problems); ok {
					ps = pe
				}
				for _, pr := range ps {
					fmt.Fprintf(a.stderr, "%s:%d: %s\n", args[0], pr.Line, pr.Msg)
				}
				if ps == nil {
					fmt.Fprintf(a.stderr, "%s: %v\n", args[0], err)
				}
				return exitCode(1)
			}
			fmt.Fprintf(a.stdout, "%s: ok (%d allowed images, %d tenants, default section: %v)\n", args[0], len(p.Images), len(p.Tenants), p.Default != nil)
			return nil
		},
	})
	return cmd
}

func (a *app) callCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "call CLASS ID METHOD [JSON-ARGS]",
		Short: "Call a method of a durable object (POST /v1/objects/CLASS/ID/METHOD)",
		Args:  cobra.RangeArgs(3, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var in any
			if len(args) == 4 {
				in = json.RawMessage(args[3])
			}
			var out json.RawMessage
			if err := c.CallObject(cmd.Context(), args[0], args[1], args[2], in, &out); err != nil {
				return err
			}
			return printJSON(a.stdout, out)
		},
	}
	return cmd
}
