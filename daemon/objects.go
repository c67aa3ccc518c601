package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
)

// compute runs durable objects' containers as berth sandboxes through the
// sandbox controller's public methods (the same ones the HTTP API uses).
type compute struct {
	m      *controller.Manager
	images images
	policy *policy.Policy
}

var _ durable.Compute = compute{}

func (c compute) Start(ctx context.Context, name string, o durable.StartOptions) error {
	cur, err := c.m.Get(ctx, name)
	switch {
	case err == nil && cur.State == api.StateRunning:
		return errdefs.FailedPrecondition("container %q is already running", name)
	case err == nil && o.Snapshot != nil:
		// Starting from a snapshot starts fresh: the old writable layer
		// goes (the snapshot itself stays).
		if err := c.m.Destroy(ctx, name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	case err != nil && !errors.Is(err, errdefs.ErrNotFound):
		return err
	}
	internet := o.Internet
	req := api.CreateSandboxRequest{Name: name, Image: o.Image, Instance: o.Instance, Internet: &internet, Env: o.Env, Labels: o.Labels}
	if o.Resources != nil {
		req.Resources = &api.Resources{VCPU: o.Resources.VCPU, MemoryMiB: o.Resources.MemoryMiB, DiskMB: o.Resources.DiskMB}
	}
	if o.Snapshot != nil {
		req.Snapshot = o.Snapshot.ID
	}
	if _, _, err := c.m.GetOrCreate(ctx, req, false); err != nil {
		return err
	}
	if len(o.Entrypoint) > 0 {
		ag, release, err := c.m.Agent(ctx, name)
		if err != nil {
			return err
		}
		defer release()
		if _, err := ag.StartProcess(ctx, api.StartProcessRequest{Command: shellJoin(o.Entrypoint), ID: "entrypoint", Env: o.Env}); err != nil {
			return fmt.Errorf("start entrypoint: %w", err)
		}
	}
	return nil
}

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func (c compute) Status(ctx context.Context, name string) (durable.Status, error) {
	sb, err := c.m.Get(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return durable.Status{State: "destroyed"}, nil
	}
	if err != nil {
		return durable.Status{}, err
	}
	return durable.Status{Exists: true, Running: sb.State == api.StateRunning, State: sb.State, Error: sb.Error, OOM: sb.OOMKilled}, nil
}

func (c compute) Exec(ctx context.Context, name string, argv []string, o durable.ExecOptions) (durable.Process, error) {
	if o.PTY {
		return c.ptyExec(ctx, name, argv, o)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &process{stdout: newBufPipe(), stderr: newBufPipe(), cancel: cancel, done: make(chan struct{})}
	go func() {
		st, err := c.m.Exec(pctx, name, api.ExecRequest{Argv: argv, Cwd: o.Cwd, Env: o.Env, User: o.User, Stdin: o.Stdin}, p.stdout, p.stderr)
		p.code, p.err = st.ExitCode, err
		p.stdout.Close()
		p.stderr.Close()
		close(p.done)
	}()
	return p, nil
}

func (c compute) Signal(ctx context.Context, name string, sig int) error {
	switch syscall.Signal(sig) {
	case syscall.SIGTERM, syscall.SIGKILL:
		// The main process is berth's agent: stopping it stops the
		// container, which keeps its files (it sleeps).
		return c.m.Sleep(ctx, name)
	}
	return errdefs.InvalidArgument("signal %d: only 15 (SIGTERM) and 9 (SIGKILL) reach the container's main process", sig)
}

func (c compute) Destroy(ctx context.Context, name, reason string) error {
	return c.m.Destroy(ctx, name)
}

func (c compute) SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error {
	return c.m.SetSleepAfter(ctx, name, d)
}

func (c compute) Snapshot(ctx context.Context, name string, o durable.SnapshotOptions) (durable.SnapshotHandle, error) {
	req := api.SnapshotRequest{Name: o.Name}
	if o.TTL > 0 {
		req.TTL = o.TTL.String()
	}
	sn, err := c.m.Snapshot(ctx, name, req)
	if err != nil {
		return durable.SnapshotHandle{}, err
	}
	return durable.SnapshotHandle{ID: sn.ID, Name: sn.Name, SizeBytes: sn.SizeBytes, BaseImageDigest: sn.BaseImageDigest}, nil
}

func (c compute) Images(ctx context.Context) (map[string]string, error) {
	if c.policy != nil && len(c.policy.Images) > 0 {
		out := make(map[string]string, len(c.policy.Images))
		for n, d := range c.policy.Images {
			out[n] = d
		}
		return out, nil
	}
	list, err := c.images.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
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
	stdout, stderr *bufPipe
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

const maxBufferedExecOutput = 16 << 20

// bufPipe is an in-memory pipe whose writer never blocks; beyond the cap
// output is dropped.
type bufPipe struct {
	mu     sync.Mutex
	cond   *sync.Cond
	buf    []byte
	closed bool
}

func newBufPipe() *bufPipe {
	p := &bufPipe{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *bufPipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if room := maxBufferedExecOutput - len(p.buf); room > 0 {
		p.buf = append(p.buf, b[:min(room, len(b))]...)
	}
	p.cond.Broadcast()
	return len(b), nil
}

func (p *bufPipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && !p.closed {
		p.cond.Wait()
	}
	if len(p.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	return n, nil
}

func (p *bufPipe) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	return nil
}
