package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

// policyFlags are the egress policy flags shared by 'sandbox create' and
// 'egress set'.
type policyFlags struct {
	allow, deny, inject []string
}

func (p *policyFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&p.allow, "allow", nil, "let out HOST, *.DOMAIN, IP or CIDR, optionally :PORT (repeatable)")
	f.StringArrayVar(&p.deny, "deny", nil, "refuse HOST, *.DOMAIN, IP or CIDR, optionally :PORT (repeatable; deny wins)")
	f.StringArrayVar(&p.inject, "inject", nil, "inject a header into HTTPS to a host: 'host=H,header=N,secret=S[,prefix=Bearer]' or 'host=H,header=N,value=TEMPLATE' (repeatable)")
}

func (p *policyFlags) set() bool { return len(p.allow)+len(p.deny)+len(p.inject) > 0 }

func (p *policyFlags) policy(internet bool) (api.NetworkPolicy, error) {
	out := api.NetworkPolicy{Internet: internet, Allow: p.allow, Deny: p.deny}
	byHost := map[string]int{}
	for _, s := range p.inject {
		host, header, value, err := parseInject(s)
		if err != nil {
			return out, err
		}
		i, ok := byHost[host]
		if !ok {
			i = len(out.Inject)
			byHost[host] = i
			out.Inject = append(out.Inject, api.InjectRule{Host: host, SetHeaders: map[string]string{}})
		}
		out.Inject[i].SetHeaders[header] = value
	}
	return out, nil
}

// parseInject reads 'host=H,header=N,secret=S[,prefix=P]' or
// 'host=H,header=N,value=TEMPLATE' (value last: it may hold commas).
func parseInject(s string) (host, header, value string, err error) {
	var secret, prefix string
	rest := s
	for rest != "" {
		var kv string
		if strings.HasPrefix(rest, "value=") {
			kv, rest = rest, ""
		} else {
			kv, rest, _ = strings.Cut(rest, ",")
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", "", "", fmt.Errorf("--inject %q: %q is not KEY=VALUE", s, kv)
		}
		switch k {
		case "host":
			host = v
		case "header":
			header = v
		case "secret":
			secret = v
		case "prefix":
			prefix = v
		case "value":
			value = v
		default:
			return "", "", "", fmt.Errorf("--inject %q: unknown key %q (host, header, secret, prefix, value)", s, k)
		}
	}
	if header == "" {
		header = "Authorization"
	}
	switch {
	case host == "":
		err = fmt.Errorf("--inject %q: host= is required", s)
	case (secret == "") == (value == ""):
		err = fmt.Errorf("--inject %q: give exactly one of secret= and value=", s)
	case secret != "":
		value = "${secret:" + secret + "}"
		if prefix != "" {
			value = prefix + " " + value
		}
	}
	return host, header, value, err
}

func (a *app) egressCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "Show and change sandboxes' network policy, and read their egress audit log",
		Long: `Every TCP connection and DNS lookup a sandbox makes passes berth's egress
proxy and resolver on the host, which apply the sandbox's policy: internet
on or off, allow and deny rules (host names and *.wildcards, IPs and CIDRs,
optional ports) and header injection for HTTPS hosts, with secrets that stay
on the host (see 'berth secret'). The host, other sandboxes, loopback,
link-local and metadata addresses and private ranges are always blocked.`,
	}
	cmd.AddCommand(a.egressLogCmd(), a.egressGetCmd(), a.egressSetCmd())
	return cmd
}

func (a *app) egressLogCmd() *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "log NAME",
		Short: "Print a sandbox's egress decisions (oldest first)",
		Long: `Print the egress audit log of a sandbox: one line per proxied connection
(with its bytes), DNS lookup and refused request, with the rule that
decided it.

Examples:
  berth egress log agent-1
  berth egress log agent-1 --limit 20 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			evs, err := c.EgressLog(cmd.Context(), args[0], limit)
			if err != nil {
				return err
			}
			if asJSON {
				if evs == nil {
					evs = []api.EgressEvent{}
				}
				return printJSON(a.stdout, evs)
			}
			return printEgressLog(a.stdout, evs)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "only the last N events")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func printEgressLog(w io.Writer, evs []api.EgressEvent) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tHOST\tIP\tPORT\tDECISION\tRULE\tOUT\tIN\tNOTE")
	for _, e := range evs {
		dec := "denied"
		if e.Allowed {
			dec = "allowed"
		}
		note := e.Reason
		if e.Method != "" {
			note = strings.TrimSpace(fmt.Sprintf("%s %s → %d %s", e.Method, e.Path, e.Status, note))
		}
		if e.Injected {
			note = strings.TrimSpace("injected " + note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", e.Time.Format("15:04:05.000"), e.Kind, orDash(e.Host), orDash(e.IP),
			e.Port, dec, e.Rule, e.BytesOut, e.BytesIn, note)
	}
	return tw.Flush()
}

func (a *app) egressGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get NAME",
		Short: "Print a sandbox's network policy as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.GetNetwork(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(a.stdout, p)
		},
	}
}

func (a *app) egressSetCmd() *cobra.Command {
	var (
		pf       policyFlags
		internet bool
	)
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Replace a sandbox's network policy (applies at once, no restart)",
		Long: `Replace the network policy of a sandbox. A running sandbox gets it at once:
connections the new policy still allows stay open, the others are closed.

Examples:
  berth egress set agent-1 --allow api.github.com --allow '*.npmjs.org'
  berth egress set agent-1 --internet --deny '*.example.com'
  berth egress set agent-1 --inject 'host=api.github.com,header=Authorization,secret=github,prefix=Bearer'
  berth egress set agent-1                     # nothing gets out`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := pf.policy(internet)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			out, err := c.SetNetwork(cmd.Context(), args[0], p)
			if err != nil {
				return err
			}
			return printJSON(a.stdout, out)
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVar(&internet, "internet", false, "let out what no rule names")
	return cmd
}

func (a *app) secretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Store, list and delete secrets for credential injection (write-only)",
		Long: `Secrets are kept by the berth server and added to a sandbox's HTTPS
requests by the egress proxy, on the host, per the sandbox's --inject rules
(${secret:NAME} in a header value). No command or API call returns a value,
and the sandbox never sees it.`,
	}
	set := &cobra.Command{
		Use:   "set NAME [VALUE]",
		Short: "Store a secret (the value is read from stdin when not given)",
		Long: `Store a secret. Without VALUE it is read from stdin (a trailing newline is
dropped), which keeps it out of shell history and process lists.

Examples:
  printf %s "$GITHUB_TOKEN" | berth secret set github
  berth secret set github < token.txt`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var value string
			if len(args) == 2 {
				value = args[1]
			} else {
				b, err := io.ReadAll(io.LimitReader(a.stdin, 1<<20))
				if err != nil {
					return err
				}
				value = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			}
			if value == "" {
				return errors.New("empty secret value")
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.SetSecret(cmd.Context(), args[0], value)
		},
	}
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List secret names",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListSecrets(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tUPDATED")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.UpdatedAt.Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a secret",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.DeleteSecret(cmd.Context(), args[0])
		},
	}
	cmd.AddCommand(set, ls, rm)
	return cmd
}
