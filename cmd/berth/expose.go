package main

import (
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

func (a *app) exposeCmd() *cobra.Command {
	var req api.ExposePortRequest
	cmd := &cobra.Command{
		Use:   "expose NAME PORT [--name LABEL] [--private] [--token TOKEN]",
		Short: "Give a port of a sandbox a preview URL",
		Long: `Expose a TCP port of a sandbox at a preview URL. The service may listen on
127.0.0.1 inside the sandbox; berth tunnels to it through the sandbox's
agent, so it works with the sandbox's internet off.

Two URLs are printed: the host form http://{port}-{sandbox}-{token}.{host}/
(needs wildcard DNS; *.localhost works in browsers and curl) and the path
form, for clients without wildcard names. HTTP, streaming responses and
WebSockets are proxied.

A URL lives as long as the sandbox's current run: after the sandbox sleeps
or restarts it answers 410 and does not wake it; expose the port again for
a new URL. Exposing a port again also rotates its token, unless --token
names it (8 to 32 characters from [a-z0-9]): the same token gives the same
URL again, also after the sandbox slept. --private makes the URL require
"Authorization: Bearer <API key>".

Examples:
  berth start dev -- python3 -m http.server 8000
  berth expose dev 8000
  berth expose dev 3000 --name web --private
  berth expose dev 8000 --token devpreview01
  berth unexpose dev 8000
  berth ports dev`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return fmt.Errorf("PORT must be a number from 1 to 65535, got %q", args[1])
			}
			req.Port = port
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.ExposePort(cmd.Context(), args[0], req)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, p.URL)
			fmt.Fprintln(a.stdout, p.PathURL)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "a label for the port")
	cmd.Flags().BoolVar(&req.Private, "private", false, "require the API key (Authorization: Bearer) on the preview URL")
	cmd.Flags().StringVar(&req.Token, "token", "", "the URL's token (8-32 characters from [a-z0-9]) instead of a random one, for a stable URL")
	return cmd
}

func (a *app) unexposeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "unexpose NAME PORT",
		Short: "End access to a port's preview URL",
		Long: `End access to a preview URL at once: open connections through it are
closed and the URL answers 404.

Example:
  berth unexpose dev 8000`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil {
				return fmt.Errorf("PORT must be a number, got %q", args[1])
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.UnexposePort(cmd.Context(), args[0], port)
		},
	}
}

func (a *app) portsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ports NAME",
		Short: "List a sandbox's exposed ports",
		Long: `List the exposed ports of a sandbox with their preview URLs. A port exposed
in an earlier run of the sandbox is "stale" (its URL answers 410).

Example:
  berth ports dev`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ports, err := c.ListPorts(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, ports)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PORT\tNAME\tSTATUS\tPRIVATE\tURL")
			for _, p := range ports {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\n", p.Port, p.Name, p.Status, p.Private, p.URL)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
