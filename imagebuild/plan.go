package imagebuild

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"

	"github.com/berth-sh/berth/internal/errdefs"
)

// MaxDockerfileBytes caps the Dockerfile read from a context.
const MaxDockerfileBytes = 1 << 20

// plan is a parsed, checked Dockerfile.
type plan struct {
	stages   []instructions.Stage
	metaArgs []instructions.ArgCommand
	escape   rune
}

// line is the first line of a command, for errors.
func line(c instructions.Command) int {
	if loc := c.Location(); len(loc) > 0 {
		return loc[0].Start.Line
	}
	return 0
}

func refuse(c instructions.Command, format string, args ...any) error {
	return errdefs.InvalidArgument("Dockerfile line %d: %s: %s", line(c), strings.ToUpper(c.Name()), fmt.Sprintf(format, args...))
}

// parse parses a Dockerfile with buildkit's parser and instructions
// packages and refuses what berth does not execute, naming the line.
func parse(dockerfile []byte) (*plan, error) {
	if len(dockerfile) > MaxDockerfileBytes {
		return nil, errdefs.InvalidArgument("the Dockerfile is over %d bytes", MaxDockerfileBytes)
	}
	res, err := parser.Parse(bytes.NewReader(dockerfile))
	if err != nil {
		return nil, errdefs.InvalidArgument("Dockerfile: %v", err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, errdefs.InvalidArgument("Dockerfile: %v", err)
	}
	if len(stages) == 0 {
		return nil, errdefs.InvalidArgument("Dockerfile has no FROM")
	}
	for _, st := range stages {
		if st.Platform != "" && st.Platform != "linux/amd64" {
			return nil, errdefs.InvalidArgument("Dockerfile line %d: FROM --platform=%s: this builder builds linux/amd64 only", fromLine(st), st.Platform)
		}
		for _, c := range st.Commands {
			if err := supported(c); err != nil {
				return nil, err
			}
		}
	}
	return &plan{stages: stages, metaArgs: metaArgs, escape: res.EscapeToken}, nil
}

func fromLine(st instructions.Stage) int {
	if len(st.Location) > 0 {
		return st.Location[0].Start.Line
	}
	return 0
}

// supported refuses instructions and flags the builder does not run.
func supported(c instructions.Command) error {
	switch c := c.(type) {
	case *instructions.RunCommand:
		if len(c.FlagsUsed) > 0 {
			return refuse(c, "--%s is not supported (no RUN --mount, --network or --security: secrets come in through the build's egress inject rules)", c.FlagsUsed[0])
		}
		if len(c.Files) > 0 {
			return refuse(c, "heredocs are not supported")
		}
	case *instructions.CopyCommand:
		switch {
		case len(c.SourceContents) > 0:
			return refuse(c, "heredocs are not supported")
		case len(c.ExcludePatterns) > 0:
			return refuse(c, "--exclude is not supported")
		case c.Parents:
			return refuse(c, "--parents is not supported")
		}
		return checkChmod(c, c.Chmod)
	case *instructions.AddCommand:
		switch {
		case len(c.SourceContents) > 0:
			return refuse(c, "heredocs are not supported")
		case len(c.ExcludePatterns) > 0:
			return refuse(c, "--exclude is not supported")
		case c.Checksum != "":
			return refuse(c, "--checksum is not supported")
		case c.KeepGitDir != nil:
			return refuse(c, "--keep-git-dir is not supported")
		}
		for _, s := range c.SourcePaths {
			if isURL(s) {
				// The daemon would fetch it from the host, outside
				// the build's egress policy.
				return refuse(c, "remote sources (%s) are not supported: fetch them in a RUN step, which runs under the build's egress policy", s)
			}
		}
		return checkChmod(c, c.Chmod)
	case *instructions.EnvCommand, *instructions.WorkdirCommand, *instructions.UserCommand,
		*instructions.ArgCommand, *instructions.LabelCommand, *instructions.ExposeCommand,
		*instructions.CmdCommand, *instructions.EntrypointCommand, *instructions.ShellCommand,
		*instructions.StopSignalCommand, *instructions.MaintainerCommand:
	case *instructions.HealthCheckCommand:
		return refuse(c, "HEALTHCHECK is not supported (berth does not run health checks; use a create's readiness check)")
	case *instructions.OnbuildCommand:
		return refuse(c, "ONBUILD is not supported")
	case *instructions.VolumeCommand:
		return refuse(c, "VOLUME is not supported (use berth volumes)")
	default:
		return refuse(c, "not supported")
	}
	return nil
}

func checkChmod(c instructions.Command, mode string) error {
	if mode == "" {
		return nil
	}
	if _, err := parseMode(mode); err != nil {
		return refuse(c, "--chmod=%s: only an octal mode is supported", mode)
	}
	return nil
}

func isURL(s string) bool {
	for _, p := range []string{"http://", "https://", "git@", "git://"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
