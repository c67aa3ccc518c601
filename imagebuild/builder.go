package imagebuild

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Sandboxes is what a RUN step needs of the control plane: a sandbox from
// an image, a command in it, and its writable layer as a snapshot.
type Sandboxes interface {
	GetOrCreate(ctx context.Context, req api.CreateSandboxRequest, createOnly bool) (api.Sandbox, bool, error)
	Exec(ctx context.Context, name string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error)
	Destroy(ctx context.Context, name string) error
	Snapshot(ctx context.Context, sandbox string, req api.SnapshotRequest) (api.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
}

// SnapshotLayers opens a snapshot's layer blob (tar+zstd, OCI whiteouts).
type SnapshotLayers interface {
	OpenSnapshotLayer(ctx context.Context, id string) (io.ReadCloser, error)
}

// Options configures a Builder. Zero values take the defaults.
type Options struct {
	Images    *image.Store
	Sandboxes Sandboxes
	Layers    SnapshotLayers
	// Dir holds the step cache and per-build scratch (<data>/builds).
	Dir string
	// Concurrent bounds builds at a time (default 1): a build's RUN
	// steps are sandboxes like any other, and this keeps builds from
	// taking every start slot of the host.
	Concurrent int
	// Instance sizes RUN sandboxes unless a request names one (default
	// "standard-1").
	Instance string
	// StepTimeout bounds one RUN (default 30m).
	StepTimeout time.Duration
	// MaxContextBytes caps the build context's file bytes (default 4 GiB).
	MaxContextBytes int64
}

// Builder runs Dockerfile builds. It is safe for concurrent use.
type Builder struct {
	opts  Options
	cache *cache
	slots chan struct{}
}

// New returns a Builder.
func New(o Options) (*Builder, error) {
	if o.Images == nil || o.Sandboxes == nil || o.Layers == nil || o.Dir == "" {
		return nil, errors.New("imagebuild: Images, Sandboxes, Layers and Dir are required")
	}
	if o.Concurrent <= 0 {
		o.Concurrent = 1
	}
	if o.Instance == "" {
		o.Instance = "standard-1"
	}
	if o.StepTimeout <= 0 {
		o.StepTimeout = 30 * time.Minute
	}
	if o.MaxContextBytes <= 0 {
		o.MaxContextBytes = 4 << 30
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(filepath.Join(o.Dir, "tmp")); err == nil {
		for _, e := range ents { // a crashed build's scratch
			os.RemoveAll(filepath.Join(o.Dir, "tmp", e.Name()))
		}
	}
	c, err := openCache(filepath.Join(o.Dir, "cache.json"))
	if err != nil {
		return nil, err
	}
	return &Builder{opts: o, cache: c, slots: make(chan struct{}, o.Concurrent)}, nil
}

// build is one running build.
type build struct {
	b       *Builder
	req     api.BuildRequest
	id      string
	tmp     string
	ctxDir  string
	ctxFD   int
	log     func(format string, args ...any)
	plan    *plan
	stages  []*state
	names   map[string]int
	meta    map[string]string
	step    int
	steps   int
	sandbox int
}

// state is a stage as built so far.
type state struct {
	layers  []image.Layer
	cf      v1.ConfigFile
	key     string
	shell   []string
	args    map[string]string // ARGs in scope (exposed to RUN as env)
	cmdSet  bool
	created map[string]bool // dirs this stage made (COPY/WORKDIR)
}

func (s *state) clone() *state {
	c := *s
	c.layers = append([]image.Layer(nil), s.layers...)
	c.cf.Config.Env = append([]string(nil), s.cf.Config.Env...)
	c.cf.History = append([]v1.History(nil), s.cf.History...)
	c.args = map[string]string{}
	c.created = map[string]bool{}
	if s.cf.Config.Labels != nil {
		c.cf.Config.Labels = map[string]string{}
		for k, v := range s.cf.Config.Labels {
			c.cf.Config.Labels[k] = v
		}
	}
	if s.cf.Config.ExposedPorts != nil {
		c.cf.Config.ExposedPorts = map[string]struct{}{}
		for k := range s.cf.Config.ExposedPorts {
			c.cf.Config.ExposedPorts[k] = struct{}{}
		}
	}
	c.shell = append([]string(nil), s.shell...)
	return &c
}

// Build runs the Dockerfile in the context tar (hostile: unpacked with
// image.Unpack's rules) and stores the result under req.Name. progress
// gets one message per log line.
func (b *Builder) Build(ctx context.Context, req api.BuildRequest, contextTar io.Reader, progress func(api.Progress)) (api.Image, error) {
	if req.Name != "" {
		if err := image.ValidateName(req.Name); err != nil {
			return api.Image{}, err
		}
	}
	if req.Dockerfile == "" {
		req.Dockerfile = "Dockerfile"
	}
	log := func(format string, args ...any) {
		if progress != nil {
			progress(api.Progress{Message: fmt.Sprintf(format, args...)})
		}
	}
	select {
	case b.slots <- struct{}{}:
	default:
		log("waiting for a build slot (%d builds at a time)", cap(b.slots))
		select {
		case b.slots <- struct{}{}:
		case <-ctx.Done():
			return api.Image{}, ctx.Err()
		}
	}
	defer func() { <-b.slots }()

	var rb [6]byte
	_, _ = rand.Read(rb[:])
	bd := &build{b: b, req: req, id: hex.EncodeToString(rb[:]), log: log, names: map[string]int{}, meta: map[string]string{}, ctxFD: -1}
	tmp, err := os.MkdirTemp(filepath.Join(b.opts.Dir, "tmp"), "build-")
	if err != nil {
		return api.Image{}, err
	}
	bd.tmp = tmp
	defer func() {
		if bd.ctxFD >= 0 {
			closeFD(bd.ctxFD)
		}
		os.RemoveAll(tmp)
	}()
	start := time.Now()
	img, err := bd.run(ctx, contextTar)
	if err != nil {
		log("build failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
		return api.Image{}, err
	}
	log("built %s in %s", img.Digest, time.Since(start).Round(time.Millisecond))
	return img.APIImage(), nil
}

func (bd *build) run(ctx context.Context, contextTar io.Reader) (*image.Image, error) {
	if err := bd.receiveContext(ctx, contextTar); err != nil {
		return nil, err
	}
	df, err := bd.readDockerfile()
	if err != nil {
		return nil, err
	}
	if bd.plan, err = parse(df); err != nil {
		return nil, err
	}
	target := len(bd.plan.stages) - 1
	if bd.req.Target != "" {
		target = -1
		for i, st := range bd.plan.stages {
			if strings.EqualFold(st.Name, bd.req.Target) {
				target = i
			}
		}
		if target < 0 {
			return nil, errdefs.InvalidArgument("target stage %q is not in the Dockerfile", bd.req.Target)
		}
	}
	for _, a := range bd.plan.metaArgs {
		for _, kv := range a.Args {
			v, given := bd.req.BuildArgs[kv.Key]
			if !given && kv.Value != nil {
				if v, err = bd.expand(*kv.Value, nil); err != nil {
					return nil, refuse(&a, "%v", err)
				}
			}
			bd.meta[kv.Key] = v
		}
	}
	for i := 0; i <= target; i++ {
		bd.steps += len(bd.plan.stages[i].Commands) + 1
	}
	for i := 0; i <= target; i++ {
		st, err := bd.stage(ctx, i)
		if err != nil {
			return nil, err
		}
		bd.stages = append(bd.stages, st)
		if n := bd.plan.stages[i].Name; n != "" {
			bd.names[strings.ToLower(n)] = i
		}
	}
	final := bd.stages[target]
	final.cf.Created = v1.Time{Time: time.Now().UTC().Truncate(time.Second)}
	bd.log("storing the image (%d layers)", len(final.layers))
	return bd.b.opts.Images.Compose(ctx, final.layers, final.cf, bd.req.Name, nil)
}

// expand substitutes $VARS in word from env (KEY=VALUE), then the stage's
// ARGs... as the caller passes them.
func (bd *build) expand(word string, env []string) (string, error) {
	lex := shell.NewLex(bd.plan.escape)
	out, _, err := lex.ProcessWord(word, shell.EnvsFromSlice(env))
	return out, err
}

// stageEnv is what $VARS see in a stage: its ARGs, then its ENV (which
// wins), as docker does.
func stageEnv(st *state) []string {
	var env []string
	for k, v := range st.args {
		env = append(env, k+"="+v)
	}
	return append(env, st.cf.Config.Env...)
}

func (bd *build) stage(ctx context.Context, i int) (*state, error) {
	ps := bd.plan.stages[i]
	var meta []string
	for k, v := range bd.meta {
		meta = append(meta, k+"="+v)
	}
	base, err := bd.expand(ps.BaseName, meta)
	if err != nil {
		return nil, errdefs.InvalidArgument("Dockerfile line %d: FROM %s: %v", fromLine(ps), ps.BaseName, err)
	}
	bd.step++
	bd.log("[%d/%d] line %d: FROM %s", bd.step, bd.steps, fromLine(ps), base)
	st, err := bd.from(ctx, base, fromLine(ps))
	if err != nil {
		return nil, err
	}
	for _, c := range ps.Commands {
		bd.step++
		if err := bd.command(ctx, st, c); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func (bd *build) from(ctx context.Context, base string, ln int) (*state, error) {
	if j, ok := bd.names[strings.ToLower(base)]; ok {
		return bd.stages[j].clone(), nil
	}
	if strings.EqualFold(base, "scratch") {
		st := &state{key: chain("scratch"), args: map[string]string{}, created: map[string]bool{}, shell: []string{"/bin/sh", "-c"}}
		st.cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		return st, nil
	}
	img, err := bd.resolveImage(ctx, base)
	if err != nil {
		return nil, errdefs.Wrap(errdefs.Kind(err), err, "Dockerfile line %d: FROM %s", ln, base)
	}
	cf, err := bd.b.opts.Images.ConfigFile(ctx, img)
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	st := &state{layers: img.LayerList(), cf: *cf, key: chain(img.Digest), args: map[string]string{}, created: map[string]bool{}, shell: []string{"/bin/sh", "-c"}}
	st.cf.Config.Healthcheck, st.cf.Config.OnBuild = nil, nil
	bd.log(" ---> %s", img.Digest)
	return st, nil
}

// resolveImage finds ref in the store, pulling a registry reference that
// is not there yet through the store's pull (its registry rules apply).
func (bd *build) resolveImage(ctx context.Context, ref string) (*image.Image, error) {
	img, err := bd.b.opts.Images.Resolve(ctx, ref)
	if err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return img, err
	}
	bd.log(" ---> %s is not in the image store; pulling it", ref)
	img, perr := bd.b.opts.Images.Pull(ctx, ref, "", nil)
	if perr != nil {
		return nil, errdefs.Wrap(errdefs.Kind(perr), perr, "not in the image store, and the pull failed")
	}
	return img, nil
}

// command runs one instruction on st.
func (bd *build) command(ctx context.Context, st *state, c instructions.Command) error {
	if ex, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		env := stageEnv(st)
		if err := ex.Expand(func(w string) (string, error) { return bd.expand(w, env) }); err != nil {
			return refuse(c, "%v", err)
		}
	}
	text := c.(fmt.Stringer).String()
	bd.log("[%d/%d] line %d: %s", bd.step, bd.steps, line(c), text)
	start := time.Now()
	cached, err := bd.apply(ctx, st, c)
	if err != nil {
		return err
	}
	if cached {
		bd.log(" ---> CACHED")
	} else if _, meta := c.(*instructions.RunCommand); meta {
		bd.log(" ---> done in %s", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// history records an instruction in the image config.
func history(st *state, text string, empty bool) {
	st.cf.History = append(st.cf.History, v1.History{
		Created:    v1.Time{Time: time.Now().UTC().Truncate(time.Second)},
		CreatedBy:  text,
		Comment:    "berth image build",
		EmptyLayer: empty,
	})
}

// BuildImage implements control.ImageBuilds.
func (b *Builder) BuildImage(ctx context.Context, req api.BuildRequest, contextTar io.Reader, progress func(api.Progress)) (api.Image, error) {
	return b.Build(ctx, req, contextTar, progress)
}
