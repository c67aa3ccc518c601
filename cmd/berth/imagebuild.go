package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

func (a *app) imageBuildCmd() *cobra.Command {
	var (
		req       api.BuildRequest
		args      []string
		allow     []string
		netFile   string
		dockerDir string
	)
	cmd := &cobra.Command{
		Use:   "build [-f Dockerfile] [-t NAME] CONTEXT",
		Short: "Build an image from a Dockerfile",
		Long: `Build an image from a Dockerfile inside berth. CONTEXT is a directory that
is sent to the server as a tar stream; the Dockerfile is read from it
(-f names its path inside CONTEXT, default Dockerfile). Each RUN step runs
in a berth sandbox under the build's egress policy: no internet unless
--allow names hosts or --network gives a policy file (its inject rules
are how a step gets a secret without it entering any layer). Steps are
cached: a rebuild reruns from the first changed step.

Examples:
  berth image build -t myapp .
  berth image build -f docker/Dockerfile -t myapp:v2 --allow deb.debian.org --allow pypi.org .`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			if fi, err := os.Stat(pos[0]); err != nil || !fi.IsDir() {
				return fmt.Errorf("context %q is not a directory", pos[0])
			}
			if dockerDir != "" {
				req.Dockerfile = dockerDir
			}
			for _, kv := range args {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					v, ok = os.LookupEnv(k) // docker's --build-arg NAME form
				}
				if !ok {
					continue
				}
				if req.BuildArgs == nil {
					req.BuildArgs = map[string]string{}
				}
				req.BuildArgs[k] = v
			}
			if netFile != "" {
				b, err := os.ReadFile(netFile)
				if err != nil {
					return err
				}
				var p api.NetworkPolicy
				if err := json.Unmarshal(b, &p); err != nil {
					return fmt.Errorf("%s: %w", netFile, err)
				}
				req.Network = &p
			}
			if len(allow) > 0 {
				if req.Network == nil {
					req.Network = &api.NetworkPolicy{}
				}
				req.Network.Allow = append(req.Network.Allow, allow...)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(client.TarContext(pos[0], pw)) }()
			defer pr.Close()
			img, err := c.BuildImage(cmd.Context(), req, pr, a.printProgress)
			if err != nil {
				return err
			}
			a.printImage("built", img)
			return nil
		},
	}
	cmd.Flags().StringVarP(&dockerDir, "file", "f", "", "the Dockerfile's path inside CONTEXT (default Dockerfile)")
	cmd.Flags().StringVarP(&req.Name, "tag", "t", "", "name the image (NAME[:TAG])")
	cmd.Flags().StringVar(&req.Target, "target", "", "build this stage (default the last)")
	cmd.Flags().StringArrayVar(&args, "build-arg", nil, "set a build ARG (KEY=VALUE, or KEY from the environment)")
	cmd.Flags().BoolVar(&req.NoCache, "no-cache", false, "rerun every step")
	cmd.Flags().StringVar(&req.Instance, "instance", "", "instance type of RUN sandboxes (default standard-1)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "a host RUN steps may reach (repeatable)")
	cmd.Flags().StringVar(&netFile, "network", "", "a JSON network policy file for RUN steps (allow, deny, inject)")
	return cmd
}
