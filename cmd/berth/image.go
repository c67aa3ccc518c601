package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/image"
)

func (a *app) imageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Pull, import, build, list and remove images",
		Long: `Sandboxes start from OCI images kept in berth's local store, pinned by
digest. Get one by pulling it from a registry, importing a 'docker save' or
OCI-layout tarball, or building the default debian-trixie base from Debian
packages. Name an image with --name to refer to it by that name in
'berth sandbox create --image'.`,
	}
	cmd.AddCommand(a.imagePullCmd(), a.imagePushCmd(), a.imageImportCmd(), a.imageBuildCmd(), a.imageLsCmd(), a.imageRmCmd(), a.imageBuildBaseCmd())
	return cmd
}

// printProgress writes progress events to stderr: every new message, and
// byte counts of a running step at most once a second.
func (a *app) printProgress(p api.Progress) {
	if p.Message == "" {
		return
	}
	line := p.Message
	switch {
	case p.Total > 0:
		line = fmt.Sprintf("%s (%s/%s)", p.Message, humanBytes(p.Current), humanBytes(p.Total))
	case p.Current > 0:
		line = fmt.Sprintf("%s (%s)", p.Message, humanBytes(p.Current))
	}
	counting := p.Current > 0 || p.Total > 0
	if counting && p.Message == a.lastProgress && time.Since(a.lastProgressAt) < time.Second && p.Current != p.Total {
		return
	}
	a.lastProgress, a.lastProgressAt = p.Message, time.Now()
	fmt.Fprintln(a.stderr, line)
}

func (a *app) printImage(verb string, img api.Image) {
	name := img.Name
	if name == "" {
		name = img.Ref
	}
	fmt.Fprintf(a.stdout, "%s %s %s (%d layers, %s)\n", verb, orDash(name), img.Digest, img.Layers, humanBytes(img.Size))
}

func (a *app) imagePullCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from a registry",
		Long: `Pull an image by reference, pin it by digest and unpack its layers.
Progress lines go to stderr; the result goes to stdout.

Examples:
  berth image pull docker.io/library/node:22-bookworm --name node
  berth image pull ghcr.io/example/tools@sha256:0123...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			img, err := c.PullImage(cmd.Context(), api.PullRequest{Ref: args[0], Name: name}, a.printProgress)
			if err != nil {
				return err
			}
			a.printImage("pulled", img)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "also name the image (e.g. node)")
	return cmd
}

func (a *app) imagePushCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "push IMAGE REF",
		Short: "Push a stored image to a registry (same digest)",
		Long: `Push a stored image (a name, digest or reference, as 'berth image ls'
shows them) to a registry as REF. The manifest, config and layers go byte
for byte, so the image keeps its digest there; blobs the registry has
already are skipped. Plain HTTP is used only for loopback registries;
credentials come from the daemon user's docker config
(~/.docker/config.json). Pushing is the operator's: a tenant key gets 403.

Examples:
  berth image push myapp:v1 registry.example.com/team/myapp:v1
  berth image push e2b-my-template:latest 127.0.0.1:5000/templates/my-template:latest`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			img, err := c.PushImage(cmd.Context(), api.PushRequest{Image: args[0], Ref: args[1]}, a.printProgress)
			if err != nil {
				return err
			}
			a.printImage("pushed", img)
			return nil
		},
	}
}

func (a *app) imageImportCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Import a docker save or OCI-layout tarball",
		Long: `Import an image from a tarball written by 'docker save' or an OCI image
layout packed with tar. FILE - reads the tarball from stdin. The tarball is
streamed to the server, so its size is not limited by memory.

Examples:
  berth image import ./node.tar --name node
  docker save python:3.12 | berth image import - --name python`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = a.stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			img, err := c.ImportImage(cmd.Context(), name, r, a.printProgress)
			if err != nil {
				return err
			}
			a.printImage("imported", img)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "name the image (e.g. python)")
	return cmd
}

func (a *app) imageBuildBaseCmd() *cobra.Command {
	var ifStale bool
	cmd := &cobra.Command{
		Use:   "build-base",
		Short: "Build the default debian-trixie image",
		Long: `Build debian-trixie, the default sandbox image (bash, git, curl, Node.js,
npm, Python 3 with numpy, pandas and matplotlib), from Debian packages on
this host, without a container registry. Run it once after installing
berth; it takes a few minutes. The image records the recipe it was built
from (label sh.berth.base-recipe); with --if-stale the build is skipped
when debian-trixie exists and was built from this berth's recipe.

Examples:
  berth image build-base
  berth image build-base --if-stale   # after upgrading berth`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if ifStale {
				imgs, err := c.ListImages(cmd.Context())
				if err != nil {
					return err
				}
				for _, img := range imgs {
					if img.Name == "debian-trixie" && image.IsCurrentBase(img.Labels) {
						a.printImage("up to date", img)
						return nil
					}
				}
			}
			img, err := c.BuildBase(cmd.Context(), a.printProgress)
			if err != nil {
				return err
			}
			a.printImage("built", img)
			return nil
		},
	}
	cmd.Flags().BoolVar(&ifStale, "if-stale", false, "build only if debian-trixie is missing or from an older recipe")
	return cmd
}

func (a *app) imageLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images",
		Long: `List the images in the local store.

Examples:
  berth image ls
  berth image ls --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			imgs, err := c.ListImages(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if imgs == nil {
					imgs = []api.Image{}
				}
				return printJSON(a.stdout, imgs)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tREF\tDIGEST\tSIZE\tLAYERS\tCREATED")
			now := time.Now()
			for _, img := range imgs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", orDash(img.Name), orDash(img.Ref), shortDigest(img.Digest), humanBytes(img.Size), img.Layers, humanAgo(img.CreatedAt, now))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (a *app) imageRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm REF...",
		Aliases: []string{"remove"},
		Short:   "Remove images",
		Long: `Remove images by name, reference or digest. An image that a sandbox uses
cannot be removed.

Example:
  berth image rm node sha256:0123...`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.removeEach(args, func(ref string) error { return c.RemoveImage(cmd.Context(), ref) })
		},
	}
}
