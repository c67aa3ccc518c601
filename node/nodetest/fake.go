package nodetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/internal/outpipe"
	"github.com/berth-sh/berth/node"
)

// Fake is an in-memory node.Node. Its sandboxes are records in a map; an
// Exec runs on the host (in a scratch directory per sandbox, in its own
// process group so Kill ends its children too) unless ExecFunc replaces
// it; its agents, when NewAgent is set, are real agents serving on unix
// sockets (agent/agenttest), one per sandbox for its whole life, so files
// written through Agent survive a stop. It passes Run.
type Fake struct {
	// ID is what Info reports ("fake" if empty).
	ID string
	// ImageDigests is what Images reports.
	ImageDigests map[string]string
	// ExecFunc, when set, runs every Exec instead of a host process
	// (a benchmark's trivial process measures the transport alone).
	ExecFunc func(ctx context.Context, name string, argv []string, o node.ExecOptions) (node.Process, error)

	tb       testing.TB
	newAgent func(testing.TB) string

	mu    sync.Mutex
	sbs   map[string]*fakeSandbox
	snaps int
}

type fakeSandbox struct {
	running    bool
	opts       node.StartOptions
	dir        string
	agent      *agentclient.Client
	busy       int
	lastActive time.Time
	timeout    time.Duration
	signals    []int
}

var _ node.Node = (*Fake)(nil)

// NewFake returns an empty fake node whose scratch directories go when tb
// ends. newAgent starts an agent for a new sandbox and returns its socket
// (agenttest.Start(tb).Socket does); nil: Agent fails with unavailable.
func NewFake(tb testing.TB, newAgent func(testing.TB) string) *Fake {
	return &Fake{tb: tb, newAgent: newAgent, sbs: map[string]*fakeSandbox{}}
}

// lookup returns the sandbox; the caller holds f.mu.
func (f *Fake) lookup(name string) (*fakeSandbox, error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return nil, err
	}
	sb := f.sbs[name]
	if sb == nil {
		return nil, errdefs.NotFound("sandbox %q not found", name)
	}
	return sb, nil
}

func (f *Fake) create(name string, o node.StartOptions) (*fakeSandbox, error) {
	dir, err := os.MkdirTemp("", "nodetest-fake")
	if err != nil {
		return nil, errdefs.Internal("fake node: %w", err)
	}
	f.tb.Cleanup(func() { os.RemoveAll(dir) })
	sb := &fakeSandbox{opts: o, dir: dir}
	if f.newAgent != nil {
		sb.agent = agentclient.New(f.newAgent(f.tb))
		f.tb.Cleanup(sb.agent.Close)
	}
	f.sbs[name] = sb
	return sb, nil
}

func (f *Fake) Start(ctx context.Context, name string, o node.StartOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		if sb, err = f.create(name, o); err != nil {
			return err
		}
	case err != nil:
		return err
	case o.Snapshot != nil:
		if sb.running {
			return errdefs.FailedPrecondition("container %q is already running", name)
		}
		delete(f.sbs, name) // a snapshot starts afresh
		if sb, err = f.create(name, o); err != nil {
			return err
		}
	case o.Isolation != "" && o.Isolation != sb.opts.Isolation:
		return errdefs.FailedPrecondition("sandbox %q runs with isolation %q, not %q", name, sb.opts.Isolation, o.Isolation)
	}
	sb.running = true
	sb.lastActive = time.Now()
	return nil
}

func (f *Fake) Update(ctx context.Context, name string, o node.StartOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	if err != nil {
		return err
	}
	sb.opts.Network, sb.opts.SleepAfter, sb.opts.KeepAlive = o.Network, o.SleepAfter, o.KeepAlive
	return nil
}

func (f *Fake) Stop(ctx context.Context, name string, o node.StopOptions) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	if err != nil {
		return false, err
	}
	if !sb.running {
		return false, nil
	}
	if !o.IdleSince.IsZero() && (sb.busy > 0 || sb.lastActive.After(o.IdleSince)) {
		return false, nil
	}
	sb.running = false
	return true, nil
}

func (f *Fake) Destroy(ctx context.Context, name, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.lookup(name); err != nil {
		return err
	}
	delete(f.sbs, name)
	return nil
}

func (f *Fake) Status(ctx context.Context, name string) (node.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return node.Status{State: api.StateDestroyed}, nil
	}
	if err != nil {
		return node.Status{}, err
	}
	state := api.StateSleeping
	if sb.running {
		state = api.StateRunning
	}
	return node.Status{Exists: true, Running: sb.running, State: state, LastActive: sb.lastActive, Busy: sb.busy > 0,
		Sandbox: api.Sandbox{Name: name, State: state, Image: sb.opts.Image, Labels: sb.opts.Labels}}, nil
}

// hold marks the running sandbox busy until the returned func is called.
func (f *Fake) hold(name string) (*fakeSandbox, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	if !sb.running {
		return nil, nil, errdefs.FailedPrecondition("sandbox %q is not running", name)
	}
	sb.busy++
	sb.lastActive = time.Now()
	var once sync.Once
	return sb, func() {
		once.Do(func() {
			f.mu.Lock()
			sb.busy--
			sb.lastActive = time.Now()
			f.mu.Unlock()
		})
	}, nil
}

func (f *Fake) Exec(ctx context.Context, name string, argv []string, o node.ExecOptions) (node.Process, error) {
	if len(argv) == 0 {
		return nil, errdefs.InvalidArgument("exec needs argv")
	}
	sb, release, err := f.hold(name)
	if err != nil {
		return nil, err
	}
	if f.ExecFunc != nil {
		defer release()
		return f.ExecFunc(ctx, name, argv, o)
	}
	p, err := startHost(sb.dir, argv, o, release)
	if err != nil {
		release()
		return nil, err
	}
	return p, nil
}

func (f *Fake) Signal(ctx context.Context, name string, sig int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	if err != nil {
		return err
	}
	if !sb.running || len(sb.opts.Entrypoint) == 0 {
		return errdefs.FailedPrecondition("sandbox %q has no running entrypoint", name)
	}
	sb.signals = append(sb.signals, sig)
	return nil
}

func (f *Fake) SetInactivityTimeout(ctx context.Context, name string, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	if err != nil {
		return err
	}
	sb.timeout = d
	return nil
}

func (f *Fake) Snapshot(ctx context.Context, name string, o node.SnapshotOptions) (node.SnapshotHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, err := f.lookup(name)
	if err != nil {
		return node.SnapshotHandle{}, err
	}
	f.snaps++
	return node.SnapshotHandle{ID: fmt.Sprintf("snap-%d", f.snaps), Name: o.Name, BaseImageDigest: f.ImageDigests[sb.opts.Image]}, nil
}

func (f *Fake) Images(ctx context.Context) (map[string]string, error) {
	out := make(map[string]string, len(f.ImageDigests))
	for n, d := range f.ImageDigests {
		out[n] = d
	}
	return out, nil
}

func (f *Fake) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	sb, release, err := f.hold(name) // a stopped sandbox fails: no wake
	if err != nil {
		return nil, nil, err
	}
	if sb.agent == nil {
		release()
		return nil, nil, errdefs.Unavailable("fake node: sandbox %q has no agent", name)
	}
	return sb.agent, release, nil
}

func (f *Fake) Info(ctx context.Context) (node.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := node.Info{ID: f.ID, Capacity: node.Capacity{VCPU: 2, MemoryMiB: 4096, DiskMB: 10240}, Isolation: []string{api.IsolationRunc}}
	if in.ID == "" {
		in.ID = "fake"
	}
	for _, sb := range f.sbs {
		if sb.running {
			in.Capacity.Sandboxes++
		}
	}
	for _, d := range f.ImageDigests {
		in.Images = append(in.Images, d)
	}
	sort.Strings(in.Images)
	return in, nil
}

// Signals returns the signals Signal delivered to the sandbox's entrypoint.
func (f *Fake) Signals(name string) []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sbs[name]; sb != nil {
		return append([]int(nil), sb.signals...)
	}
	return nil
}

// Busy reports how many operations (execs, agents) hold the sandbox now.
func (f *Fake) Busy(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sbs[name]; sb != nil {
		return sb.busy
	}
	return 0
}

// hostProcess is a fake exec: a host process in its own process group.
type hostProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *outpipe.Pipe
	done           chan struct{}
	code           int
	err            error
}

func startHost(dir string, argv []string, o node.ExecOptions, release func()) (*hostProcess, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if o.Cwd != "" {
		cmd.Dir = o.Cwd
	}
	cmd.Env = os.Environ()
	for k, v := range o.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if len(o.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(o.Stdin)
	}
	p := &hostProcess{cmd: cmd, stdout: outpipe.New(0), stderr: outpipe.New(0), done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A killed shell's children may hold the pipes; do not wait for them.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, errdefs.InvalidArgument("exec %q: %w", argv[0], err)
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
		default:
			p.code, p.err = -1, errdefs.Internal("exec: %w", err)
		}
		p.stdout.Close()
		p.stderr.Close()
		release()
		close(p.done)
	}()
	return p, nil
}

func (p *hostProcess) Stdout() io.Reader { return p.stdout }
func (p *hostProcess) Stderr() io.Reader { return p.stderr }

func (p *hostProcess) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	return syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

func (p *hostProcess) Wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.code, p.err
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// Done is a node.Process that already exited with code and printed out.
func Done(code int, out string) node.Process {
	p := &hostProcess{stdout: outpipe.New(0), stderr: outpipe.New(0), done: make(chan struct{}), code: code}
	p.stdout.Write([]byte(out))
	p.stdout.Close()
	p.stderr.Close()
	close(p.done)
	return p
}
