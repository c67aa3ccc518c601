package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHostBinaryLinksNoAgent keeps the host binary free of the in-sandbox
// agent. The host speaks to the agent through agentclient and agent/wire
// only; the agent package and its service packages carry the terminal
// (creack/pty) and TypeScript (esbuild) machinery, which has no business in
// the daemon, the CLI or the server. One stray import of the agent package
// from the host side would pull all of it back in, silently, so the
// dependency list of this binary is checked here.
func TestHostBinaryLinksNoAgent(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH to list the binary's dependencies")
	}
	// The default build, without test files: what ships in cmd/berth.
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %d packages; expected the whole binary: %q", len(deps), deps)
	}
	var bad []string
	for _, p := range deps {
		if why := forbiddenHostDep(p); why != "" {
			bad = append(bad, p+" ("+why+")")
		}
	}
	if len(bad) > 0 {
		t.Fatalf("cmd/berth links packages that belong in the sandbox only; find the importer with `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/berth`:\n  %s",
			strings.Join(bad, "\n  "))
	}
}

// forbiddenHostDep says why package p must not be linked into a host binary,
// or returns "".
func forbiddenHostDep(p string) string {
	const agentPkg = "github.com/berth-sh/berth/agent"
	switch {
	case strings.Contains(p, "esbuild"):
		return "esbuild: the agent's TypeScript transform"
	case strings.Contains(p, "creack/pty"):
		return "creack/pty: the agent's terminals"
	case p == agentPkg+"/wire":
		return "" // the wire protocol is shared by both ends
	case p == agentPkg || strings.HasPrefix(p, agentPkg+"/"):
		return "the in-sandbox agent"
	}
	return ""
}

func TestForbiddenHostDep(t *testing.T) {
	for p, bad := range map[string]bool{
		"github.com/berth-sh/berth/agent":             true,
		"github.com/berth-sh/berth/agent/pty":         true,
		"github.com/berth-sh/berth/agent/agenttest":   true,
		"github.com/evanw/esbuild/pkg/api":            true,
		"github.com/creack/pty":                       true,
		"github.com/berth-sh/berth/agent/wire":        false,
		"github.com/berth-sh/berth/agentclient":       false,
		"github.com/berth-sh/berth/internal/errdefs":  false,
		"github.com/berth-sh/berth/agentclientextras": false,
	} {
		if got := forbiddenHostDep(p) != ""; got != bad {
			t.Errorf("forbiddenHostDep(%q) forbidden = %v, want %v", p, got, bad)
		}
	}
}
