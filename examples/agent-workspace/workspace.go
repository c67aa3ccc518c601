package main

import (
	"context"
	"hash/fnv"
	"io"
	"strings"

	"github.com/berth-sh/berth/durable"
)

// Images says which image each choice uses. They are names of images the
// operator has (ctx.Container.Images), each pinned by digest.
type Images struct {
	Python, Node string
	// Canary goes to CanaryPercent of workspace ids, chosen by a stable
	// hash of the id, so one workspace always gets the same answer.
	Canary        string
	CanaryPercent uint32
}

// AgentSandbox is one agent's workspace: a durable object whose container
// is chosen at run time from the toolchain and the workload.
type AgentSandbox struct {
	st     *durable.State
	images Images
}

// StartArgs is StartWorkspace's argument.
type StartArgs struct {
	Toolchain string `json:"toolchain"` // python | node
	Workload  string `json:"workload"`  // build → standard-2, else standard-1
}

// StartResult reports what StartWorkspace did.
type StartResult struct {
	AlreadyRunning bool   `json:"alreadyRunning"`
	Image          string `json:"image,omitempty"`
	Instance       string `json:"instance,omitempty"`
	Why            string `json:"why,omitempty"` // pinned, canary or toolchain
}

// Key names in the object's storage.
const (
	keyPinned   = "pinned-image"
	keySnapshot = "workspace-snapshot"
)

// StartWorkspace starts the workspace's container, or returns at once if it
// runs.
func (w *AgentSandbox) StartWorkspace(ctx context.Context, a StartArgs) (StartResult, error) {
	if w.st.Container.Running(ctx) {
		return StartResult{AlreadyRunning: true}, nil
	}
	var pinned string
	if _, err := w.st.Storage.Get(ctx, keyPinned, &pinned); err != nil {
		return StartResult{}, err
	}
	img, why, err := chooseImage(w.images, w.st.Address.ID, a.Toolchain, pinned)
	if err != nil {
		return StartResult{}, err
	}
	inst := chooseInstance(a.Workload)
	err = w.st.Container.Start(ctx, durable.StartOptions{
		Image: img, Instance: inst, Internet: true,
		Labels: map[string]string{"toolchain": a.Toolchain, "workload": a.Workload},
	})
	if err != nil {
		return StartResult{}, err
	}
	return StartResult{Image: img, Instance: inst, Why: why}, nil
}

// chooseImage is the image decision: a pin wins, then the canary for the
// ids the hash picks, then the toolchain's image.
func chooseImage(im Images, id, toolchain, pinned string) (image, why string, err error) {
	if pinned != "" {
		return pinned, "pinned", nil
	}
	var base string
	switch toolchain {
	case "python":
		base = im.Python
	case "node":
		base = im.Node
	default:
		return "", "", durable.InvalidArgument("toolchain must be python or node, got %q", toolchain)
	}
	if im.Canary != "" && inCanary(id, im.CanaryPercent) {
		return im.Canary, "canary", nil
	}
	return base, "toolchain", nil
}

// inCanary is stable: the same id always lands on the same side.
func inCanary(id string, percent uint32) bool {
	h := fnv.New32a()
	_, _ = io.WriteString(h, id)
	return h.Sum32()%100 < percent
}

func chooseInstance(workload string) string {
	if workload == "build" {
		return "standard-2"
	}
	return "standard-1"
}

// PinArgs pins one image for this workspace.
type PinArgs struct {
	Image string `json:"image"`
}

// PinImage pins (or, with an empty image, unpins) this workspace's image.
func (w *AgentSandbox) PinImage(ctx context.Context, a PinArgs) error {
	if a.Image == "" {
		return w.st.Storage.Delete(ctx, keyPinned)
	}
	return w.st.Storage.Put(ctx, keyPinned, a.Image)
}

// SaveWorkspace snapshots the container and keeps the handle.
func (w *AgentSandbox) SaveWorkspace(ctx context.Context) (durable.SnapshotHandle, error) {
	h, err := w.st.Container.SnapshotContainer(ctx, durable.SnapshotOptions{Name: "project-ready"})
	if err != nil {
		return h, err
	}
	return h, w.st.Storage.Put(ctx, keySnapshot, h)
}

// RestoreWorkspace starts the container from the saved snapshot.
func (w *AgentSandbox) RestoreWorkspace(ctx context.Context) (durable.SnapshotHandle, error) {
	var h durable.SnapshotHandle
	ok, err := w.st.Storage.Get(ctx, keySnapshot, &h)
	if err != nil {
		return h, err
	}
	if !ok {
		return h, durable.NotFound("no workspace snapshot found")
	}
	return h, w.st.Container.Start(ctx, durable.StartOptions{Snapshot: &h, Instance: "standard-2", Internet: true})
}

// DestroyWorkspace removes the container (the snapshot stays).
func (w *AgentSandbox) DestroyWorkspace(ctx context.Context) error {
	return w.st.Container.Destroy(ctx, "requested by the agent")
}

// RunArgs is a command for Run.
type RunArgs struct {
	Argv []string `json:"argv"`
	Cwd  string   `json:"cwd,omitempty"`
	PTY  bool     `json:"pty,omitempty"` // on a terminal (output merged)
}

// RunResult is a finished command.
type RunResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// Run runs one command in the workspace and waits for it.
func (w *AgentSandbox) Run(ctx context.Context, a RunArgs) (RunResult, error) {
	p, err := w.st.Container.Exec(ctx, a.Argv, durable.ExecOptions{Cwd: a.Cwd, PTY: a.PTY})
	if err != nil {
		return RunResult{}, err
	}
	var out, errb strings.Builder
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&errb, p.Stderr()); close(done) }()
	_, _ = io.Copy(&out, p.Stdout())
	<-done
	code, err := p.Wait(ctx)
	return RunResult{ExitCode: code, Stdout: out.String(), Stderr: errb.String()}, err
}
