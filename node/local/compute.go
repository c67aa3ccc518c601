package local

import (
	"context"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/outpipe"
	"github.com/berth-sh/berth/node"
)

// compute is this machine's node.Node: the machinery (runc container,
// rootfs, network, user namespace, the inventory of sandboxes) that
// controller objects drive through their st.Container (durable.Compute is
// node.Node) and the control plane (control.Plane) reaches for agents.
// The built-in Sandbox class (package controller) makes the decisions;
// compute carries them out on the sandbox its object names.
type compute struct {
	m    *Manager
	list func(ctx context.Context) ([]api.Image, error)
}

// Compute returns the Manager as a node.Node, for the durable host whose
// controller objects the Manager is attached to (AttachControllers) and
// for the control plane. list gives the image
// store's images for Images when the operator policy names none; nil: no
// images beyond the policy's.
func (m *Manager) Compute(list func(ctx context.Context) ([]api.Image, error)) node.Node {
	return compute{m: m, list: list}
}

var _ node.Node = compute{}

// request turns start options into the create request the machinery runs.
func request(name string, o node.StartOptions) api.CreateSandboxRequest {
	internet, keep := o.Internet, o.KeepAlive
	req := api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Internet: &internet,
		Env: o.Env, Labels: o.Labels, Network: o.Network, Isolation: o.Isolation, Persist: o.Persist, KeepAlive: &keep, Sleep: o.Sleep, Volumes: o.Volumes, Start: o.Start}
	if o.PersistEvery > 0 {
		req.PersistEvery = o.PersistEvery.String()
	}
	if o.Resources != nil {
		req.Resources = &api.Resources{VCPU: o.Resources.VCPU, MemoryMiB: o.Resources.MemoryMiB, DiskMB: o.Resources.DiskMB}
	}
	if o.SleepAfter > 0 {
		req.SleepAfter = o.SleepAfter.String()
	}
	if o.Snapshot != nil {
		req.Snapshot = o.Snapshot.ID
	}
	return req
}

func (c compute) Start(ctx context.Context, name string, o node.StartOptions) error {
	if o.Snapshot != nil {
		// Starting from a snapshot starts fresh: the old writable layer
		// goes (the snapshot itself stays).
		cur, err := c.m.describe(ctx, name)
		switch {
		case err == nil && cur.State == api.StateRunning:
			return errdefs.FailedPrecondition("container %q is already running", name)
		case err == nil:
			if err := c.m.destroy(ctx, name); err != nil && !errdefs.IsKind(err, errdefs.ErrNotFound) {
				return err
			}
		case !errdefs.IsKind(err, errdefs.ErrNotFound):
			return err
		}
	}
	if _, _, err := c.m.startSandbox(ctx, request(name, o), startFlags{notRunning: true, selfSleep: o.SelfSleep}); err != nil {
		return err
	}
	if len(o.Entrypoint) > 0 {
		return c.m.startEntrypoint(ctx, name, o.Entrypoint, o.Env)
	}
	return nil
}

func (c compute) Update(ctx context.Context, name string, o node.StartOptions) error {
	_, _, err := c.m.startSandbox(ctx, request(name, o), startFlags{update: true, selfSleep: o.SelfSleep})
	return err
}

func (c compute) Stop(ctx context.Context, name string, o node.StopOptions) (bool, error) {
	return c.m.stopSandbox(ctx, name, o)
}

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func (c compute) Status(ctx context.Context, name string) (node.Status, error) {
	return c.m.status(ctx, name)
}

func (c compute) Exec(ctx context.Context, name string, argv []string, o node.ExecOptions) (node.Process, error) {
	if o.PTY {
		return c.ptyExec(ctx, name, argv, o)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &process{stdout: outpipe.New(maxBufferedExecOutput), stderr: outpipe.New(maxBufferedExecOutput), cancel: cancel, done: make(chan struct{})}
	go func() {
		st, err := c.m.exec(pctx, name, api.ExecRequest{Argv: argv, Cwd: o.Cwd, Env: o.Env, User: o.User, Stdin: o.Stdin}, p.stdout, p.stderr)
		p.code, p.err = st.ExitCode, err
		p.stdout.Close()
		p.stderr.Close()
		close(p.done)
	}()
	return p, nil
}

func (c compute) Signal(ctx context.Context, name string, sig int) error {
	return c.m.signal(ctx, name, syscall.Signal(sig))
}

func (c compute) Destroy(ctx context.Context, name, reason string) error {
	return c.m.destroy(ctx, name)
}

func (c compute) SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error {
	return c.m.SetSleepAfter(ctx, name, d)
}

func (c compute) Snapshot(ctx context.Context, name string, o node.SnapshotOptions) (node.SnapshotHandle, error) {
	req := api.SnapshotRequest{Name: o.Name}
	if o.TTL > 0 {
		req.TTL = o.TTL.String()
	}
	sn, err := c.m.Snapshot(ctx, name, req)
	if err != nil {
		return node.SnapshotHandle{}, err
	}
	return node.SnapshotHandle{ID: sn.ID, Name: sn.Name, SizeBytes: sn.SizeBytes, BaseImageDigest: sn.BaseImageDigest}, nil
}

func (c compute) Images(ctx context.Context) (map[string]string, error) {
	if p := c.m.cfg.Policy; p != nil {
		if out := p.ImageDigests(); len(out) > 0 {
			return out, nil
		}
	}
	out := map[string]string{}
	if c.list == nil {
		return out, nil
	}
	list, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	for _, i := range list {
		if i.Name != "" {
			out[i.Name] = i.Digest
		}
	}
	return out, nil
}

// process is a running exec; its output is buffered (up to a cap) so a
// caller that reads only at the end never stalls the command.
type process struct {
	stdout, stderr *outpipe.Pipe
	cancel         context.CancelFunc
	done           chan struct{}
	code           int
	err            error
}

func (p *process) Stdout() io.Reader { return p.stdout }
func (p *process) Stderr() io.Reader { return p.stderr }
func (p *process) Kill() error       { p.cancel(); return nil }
func (p *process) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.code, p.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// maxBufferedExecOutput caps what an exec stream holds for a reader that
// does not keep up; beyond it output is dropped.
const maxBufferedExecOutput = 16 << 20
