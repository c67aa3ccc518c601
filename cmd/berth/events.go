package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func (a *app) eventsCmd() *cobra.Command {
	var (
		opts   client.EventsOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow lifecycle events: created, started, slept, woke, snapshotted, forked, destroyed, failed",
		Long: `Follow the lifecycle events of every sandbox (or of one, with --sandbox)
as they happen, until interrupted. Each line is one event: its id, time,
type, sandbox and detail. The events come from the journal, so --after 0
replays everything it still holds, and --after ID resumes after an event
seen before (the first column). A tenant key sees only its own sandboxes.

The same events reach operator webhooks ('berth serve --webhook URL'),
signed with HMAC-SHA256 (see docs/ARCHITECTURE.md, "Lifecycle events and
webhooks").`,
		Example: `  berth events
  berth events --sandbox my-agent --after 0
  berth events --json | jq -r 'select(.type == "sandbox.failed") | .sandbox'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.Events(cmd.Context(), opts, func(ev api.Event) error {
				if asJSON {
					b, err := json.Marshal(ev)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(a.stdout, "%s\n", b)
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "%s\t%s\t%-20s\t%s\t%s\n", ev.ID, ev.At.Local().Format("15:04:05.000"), ev.Type, ev.Sandbox, ev.Detail)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Sandbox, "sandbox", "", "only this sandbox's events")
	f.StringVar(&opts.After, "after", "", `resume after this event id ("0": from the start of the journal; default: from now)`)
	f.BoolVar(&asJSON, "json", false, "print each event as a JSON line")
	return cmd
}
