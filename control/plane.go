package control

import (
	"context"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/berth-sh/berth/agentclient"
	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/controller"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/node"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store"
)

// NodeLocal is what the control plane still hands to the node's own
// machinery (package node/local) because it needs the node's internals:
// snapshots, fork and backups (the writable layer, the blob store),
// preview ports (the agent tunnel and the proxy), egress policy and
// secrets (the proxy's state), and the label write (the record under the
// node's lock). These are still node-local; they move in issue 14.
type NodeLocal interface {
	Snapshots
	Ports
	Egress
	// WriteLabels writes the sandbox record's labels (an empty value
	// removes one) without waking it.
	WriteLabels(ctx context.Context, name string, set map[string]string) (api.Sandbox, error)
}

// PlaneConfig wires a Plane.
type PlaneConfig struct {
	// Objects runs the sandboxes' controller objects (class Sandbox,
	// package controller); its Compute must be Node.
	Objects *durable.Host
	// Store holds the sandbox records the inventory lists.
	Store store.Store
	// Node runs the sandboxes.
	Node node.Node
	// Local is the node-local rest (see NodeLocal).
	Local NodeLocal
	// Images is the image store; nil answers its routes with 412.
	Images Images
	// NodeName is this process's node: the inventory shows it as the
	// node of sandboxes whose records name no owner (a single host).
	NodeName string
	Logf     func(format string, args ...any)
}

// Plane is the control plane of one berth: it decides. Sandboxes are
// reached by name through their controller objects (get-or-create, get,
// destroy, sleep, labels), the inventory is read from the store, and
// exec, files and the dev-loop's agent access wake the sandbox through
// its object and then reach the node only through node.Node (Agent).
// It implements Backend and the E2B face's backend.
type Plane struct {
	NodeLocal
	Images
	objects  *durable.Host
	st       store.Store
	node     node.Node
	nodeName string
	logf     func(format string, args ...any)
}

// NewPlane returns the control plane over c.
func NewPlane(c PlaneConfig) *Plane {
	p := &Plane{NodeLocal: c.Local, Images: c.Images, objects: c.Objects, st: c.Store, node: c.Node, nodeName: c.NodeName, logf: c.Logf}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	if p.Images == nil {
		p.Images = noImages{}
	}
	return p
}

var _ Backend = (*Plane)(nil)

// GetOrCreate implements Sandboxes.
func (p *Plane) GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (sb api.Sandbox, created bool, err error) {
	if err := api.ValidateSandboxName(req.Name); err != nil {
		return api.Sandbox{}, false, err
	}
	since := time.Now()
	err = p.asObject(ctx, req.Name, func(o *controller.Sandbox) error {
		res, err := o.GetOrCreate(ctx, controller.CreateArgs{Request: req, CreateOnly: createOnly})
		sb, created = res.Sandbox, res.Created
		return err
	})
	if err == nil {
		err = p.awaitReady(ctx, sb, created, since)
	}
	return p.withNode(sb), created, err
}

// Get implements Sandboxes. It never wakes the sandbox.
func (p *Plane) Get(ctx context.Context, name string) (sb api.Sandbox, err error) {
	if err := p.mustExist(ctx, name); err != nil {
		return api.Sandbox{}, err
	}
	err = p.asObject(ctx, name, func(o *controller.Sandbox) error {
		sb, err = o.Get(ctx)
		return err
	})
	return p.withNode(sb), err
}

// withNode names the local node as the sandbox's when its record names
// no owner: before cluster mode every record is this host's.
func (p *Plane) withNode(sb api.Sandbox) api.Sandbox {
	if sb.Node == "" && sb.Name != "" {
		sb.Node = p.nodeName
	}
	return sb
}

// Destroy implements Sandboxes: the node removes the container, network,
// writable layer and record. Destroying a missing sandbox is not found.
func (p *Plane) Destroy(ctx context.Context, name string) error {
	if err := p.mustExist(ctx, name); err != nil {
		return err
	}
	return p.asObject(ctx, name, func(o *controller.Sandbox) error { return o.Destroy(ctx) })
}

// Sleep implements Sandboxes.
func (p *Plane) Sleep(ctx context.Context, name string) error {
	if err := p.mustExist(ctx, name); err != nil {
		return err
	}
	return p.asObject(ctx, name, func(o *controller.Sandbox) error { return o.Sleep(ctx) })
}

// List implements Sandboxes: the records in the store, by state and
// labels, and only the caller's tenant's.
func (p *Plane) List(ctx context.Context, f ListFilter) ([]api.Sandbox, error) {
	recs, err := p.st.List(ctx)
	if err != nil {
		return nil, err
	}
	out := []api.Sandbox{}
	tenant := policy.TenantFrom(ctx)
	for _, rec := range recs {
		if tenant != "" && rec.Tenant != tenant {
			continue
		}
		if f.State != "" && rec.State != f.State {
			continue
		}
		match := true
		for k, v := range f.Labels {
			if rec.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, p.withNode(rec.View()))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SetLabels writes labels (an empty value removes one) without waking
// the sandbox, then has its controller object record the new spec.
func (p *Plane) SetLabels(ctx context.Context, name string, set map[string]string) (api.Sandbox, error) {
	sb, err := p.NodeLocal.WriteLabels(ctx, name, set)
	if err == nil {
		p.refreshSpec(ctx, name)
	}
	return sb, err
}

// Exec implements Sandboxes. A running exec keeps the sandbox awake.
func (p *Plane) Exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	if err := req.CheckShape(); err != nil {
		return api.ExitStatus{}, err
	}
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return api.ExitStatus{}, err
	}
	defer release()
	return ag.Exec(ctx, req, stdout, stderr)
}

// Agent implements AgentAccess: the sandbox's agent client, waking the
// sandbox if it sleeps, with the sandbox held awake until release.
func (p *Plane) Agent(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	return p.use(ctx, name)
}

// wakeTries bounds how often use wakes a sandbox that is found asleep
// again before its agent was handed out (an idle sleep racing the wake).
const wakeTries = 3

// use is the "wake, then use the agent" path: the node's agent for a
// running sandbox at once; for one that does not run (the node answers
// failed precondition), a wake through its controller object, which
// chooses how it starts and arms its idle alarm, and then the agent.
// The sandbox cannot fall asleep until release is called.
func (p *Plane) use(ctx context.Context, name string) (*agentclient.Client, func(), error) {
	if err := api.ValidateSandboxName(name); err != nil {
		return nil, nil, err
	}
	for try := 0; ; try++ {
		ag, release, err := p.node.Agent(ctx, name)
		if err == nil {
			var once sync.Once
			return ag, func() { once.Do(release) }, nil
		}
		if try == wakeTries || !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) {
			return nil, nil, err
		}
		if err := p.wake(ctx, name); err != nil {
			return nil, nil, err
		}
	}
}

// mustExist answers not found for a name with no sandbox before any
// controller object is made for it: a stream of requests for made-up
// names must not fill the object host with live instances.
func (p *Plane) mustExist(ctx context.Context, name string) error {
	if err := api.ValidateSandboxName(name); err != nil {
		return err
	}
	st, err := p.node.Status(ctx, name)
	if err != nil {
		return err
	}
	if !st.Exists {
		return errdefs.NotFound("sandbox %q not found", name)
	}
	return nil
}

// wake wakes a sleeping sandbox through its controller object.
func (p *Plane) wake(ctx context.Context, name string) error {
	return p.asObject(ctx, name, func(o *controller.Sandbox) error {
		_, err := o.Wake(ctx)
		return err
	})
}

// refreshSpec has the sandbox's controller object record what the node
// now has, after a change that did not come through the object.
func (p *Plane) refreshSpec(ctx context.Context, name string) {
	err := p.asObject(ctx, name, func(o *controller.Sandbox) error {
		_, err := o.Refresh(ctx)
		return err
	})
	if err != nil {
		p.logf("sandbox %s: record its spec: %v", name, err)
	}
}

func (p *Plane) asObject(ctx context.Context, name string, fn func(*controller.Sandbox) error) error {
	if p.objects == nil {
		return errdefs.FailedPrecondition("the control plane has no object host")
	}
	return p.objects.DoAs(ctx, durable.Address{Class: controller.Class, ID: name}, func(obj any, _ *durable.State) error {
		return fn(obj.(*controller.Sandbox))
	})
}

// ReadFile implements Files. A download holds the sandbox awake until
// the stream is closed.
func (p *Plane) ReadFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	if w, ok := p.NodeLocal.(weakReader); ok {
		if rc, weak, err := w.WeakReadFile(ctx, name, path); weak {
			return rc, err
		}
	}
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return nil, err
	}
	rc, err := ag.ReadFile(ctx, path)
	if err != nil {
		release()
		return nil, err
	}
	return &releaseOnClose{ReadCloser: rc, release: release}, nil
}

// weakReader is the node's files-confine negative control (tests only:
// BERTH_TEST_WEAKEN=files-confine), asked before every ReadFile.
type weakReader interface {
	WeakReadFile(ctx context.Context, name, path string) (io.ReadCloser, bool, error)
}

// releaseOnClose keeps the sandbox awake while a download stream is open.
type releaseOnClose struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (r *releaseOnClose) Close() error {
	err := r.ReadCloser.Close()
	r.once.Do(r.release)
	return err
}

// WriteFile implements Files.
func (p *Plane) WriteFile(ctx context.Context, name, path string, r io.Reader, mode uint32) error {
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.WriteFile(ctx, path, r, mode)
}

// ListFiles implements Files.
func (p *Plane) ListFiles(ctx context.Context, name, path string, recursive bool) ([]api.FileInfo, error) {
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return nil, err
	}
	defer release()
	return ag.ListFiles(ctx, path, recursive)
}

// Stat implements Files.
func (p *Plane) Stat(ctx context.Context, name, path string) (api.FileInfo, error) {
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return api.FileInfo{}, err
	}
	defer release()
	return ag.Stat(ctx, path)
}

// Mkdir implements Files.
func (p *Plane) Mkdir(ctx context.Context, name string, req api.MkdirRequest) error {
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.Mkdir(ctx, req)
}

// Remove implements Files.
func (p *Plane) Remove(ctx context.Context, name, path string, recursive bool) error {
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.Remove(ctx, path, recursive)
}

// Rename implements Files.
func (p *Plane) Rename(ctx context.Context, name string, req api.RenameRequest) error {
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return err
	}
	defer release()
	return ag.Rename(ctx, req)
}

// Exists implements Files.
func (p *Plane) Exists(ctx context.Context, name, path string) (bool, error) {
	ag, release, err := p.use(ctx, name)
	if err != nil {
		return false, err
	}
	defer release()
	return ag.Exists(ctx, path)
}

// noImages answers the image routes of a control plane without an image
// store.
type noImages struct{}

func (noImages) err() error { return errdefs.FailedPrecondition("this berth has no image store") }
func (n noImages) ListImages(context.Context) ([]api.Image, error) {
	return nil, n.err()
}
func (n noImages) PullImage(context.Context, api.PullRequest, func(api.Progress)) (api.Image, error) {
	return api.Image{}, n.err()
}
func (n noImages) ImportImage(context.Context, string, io.Reader, func(api.Progress)) (api.Image, error) {
	return api.Image{}, n.err()
}
func (n noImages) BuildBase(context.Context, func(api.Progress)) (api.Image, error) {
	return api.Image{}, n.err()
}
func (n noImages) RemoveImage(context.Context, string) error { return n.err() }
