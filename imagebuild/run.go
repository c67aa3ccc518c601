package imagebuild

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

// BuildLabel marks the sandboxes of RUN steps with their build's id.
const BuildLabel = "berth.build"

// runStep executes RUN in a fresh sandbox of the stage so far: the stage
// is stored as an intermediate image, a sandbox starts from it under the
// build's egress policy and instance size, the command runs as the
// stage's USER in its WORKDIR with its ARGs in the environment, and the
// sandbox's writable layer is captured by the snapshot path (the same
// hostile-upper capture as every snapshot), filtered of berth's own mount
// points and stored as the step's layer.
func (bd *build) runStep(ctx context.Context, st *state, c *instructions.RunCommand, text string) (bool, error) {
	argv := st.argv(c.ShellDependantCmdLine)
	user := st.cf.Config.User
	if user == "" {
		user = "root"
	}
	cwd := st.cf.Config.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	args := sortedArgs(st.args)
	netKey := "none"
	if bd.req.Network != nil {
		netKey = fmt.Sprintf("%+v", *bd.req.Network)
	}
	key := chain(st.key, "RUN", strings.Join(argv, "\x00"), user, cwd, strings.Join(args, "\x00"), netKey)
	if l, ok := bd.b.cache.get(key); ok && !bd.req.NoCache && bd.b.opts.Images.HasLayer(l) {
		st.key = key
		st.layers = append(st.layers, l)
		history(st, text, false)
		return true, nil
	}

	mid, err := bd.b.opts.Images.Compose(ctx, st.layers, st.cf, "", nil)
	if err != nil {
		return false, err
	}
	bd.sandbox++
	name := fmt.Sprintf("build-%s-%d", bd.id, bd.sandbox)
	instance := bd.req.Instance
	if instance == "" {
		instance = bd.b.opts.Instance
	}
	netw := bd.req.Network
	if netw == nil {
		netw = &api.NetworkPolicy{}
	}
	keep := true
	create := api.CreateSandboxRequest{
		Name: name, Image: mid.Digest, Instance: instance, Network: netw, KeepAlive: &keep,
		Labels: map[string]string{BuildLabel: bd.id}, SleepAfter: "1h",
	}
	if _, _, err := bd.b.opts.Sandboxes.GetOrCreate(ctx, create, true); err != nil {
		return false, errdefs.Wrap(errdefs.Kind(err), err, "Dockerfile line %d: RUN: start the build sandbox", line(c))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := bd.b.opts.Sandboxes.Destroy(dctx, name); err != nil {
			bd.log("warning: destroy build sandbox %s: %v", name, err)
		}
	}()
	env := api.Env{}
	for _, kv := range args {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	out := &lineLog{log: bd.log}
	es, err := bd.b.opts.Sandboxes.Exec(ctx, name, api.ExecRequest{
		Argv: argv, User: user, Cwd: cwd, Env: env, TimeoutMs: bd.b.opts.StepTimeout.Milliseconds(),
	}, out, out)
	out.flush()
	if err != nil {
		return false, errdefs.Wrap(errdefs.Kind(err), err, "Dockerfile line %d: RUN", line(c))
	}
	switch {
	case es.TimedOut:
		return false, errdefs.New(errdefs.ErrFailedPrecondition, "Dockerfile line %d: RUN timed out after %s", line(c), bd.b.opts.StepTimeout)
	case es.ExitCode != 0:
		return false, errdefs.FailedPrecondition("Dockerfile line %d: RUN %s: exit code %d", line(c), strings.Join(c.CmdLine, " "), es.ExitCode)
	}
	snap, err := bd.b.opts.Sandboxes.Snapshot(ctx, name, api.SnapshotRequest{TTL: "1h"})
	if err != nil {
		return false, errdefs.Wrap(errdefs.Kind(err), err, "Dockerfile line %d: RUN: capture the layer", line(c))
	}
	defer func() {
		_ = bd.b.opts.Sandboxes.DeleteSnapshot(context.WithoutCancel(ctx), snap.ID)
	}()
	l, err := bd.storeSnapshot(ctx, snap.ID)
	if err != nil {
		return false, errdefs.Wrap(errdefs.Kind(err), err, "Dockerfile line %d: RUN: store the layer", line(c))
	}
	if err := bd.b.cache.put(key, l); err != nil {
		return false, err
	}
	st.key = key
	st.layers = append(st.layers, l)
	history(st, text, false)
	return false, nil
}

// storeSnapshot copies a snapshot's layer into the image store as an
// image layer, without berth's mount-point entries.
func (bd *build) storeSnapshot(ctx context.Context, id string) (image.Layer, error) {
	rc, err := bd.b.opts.Layers.OpenSnapshotLayer(ctx, id)
	if err != nil {
		return image.Layer{}, err
	}
	defer rc.Close()
	zr, err := zstd.NewReader(rc)
	if err != nil {
		return image.Layer{}, err
	}
	defer zr.Close()
	return bd.b.opts.Images.AddLayer(ctx, func(w io.Writer) error {
		tr := tar.NewReader(zr)
		tw := tar.NewWriter(w)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if excluded(hdr.Name, hdr.Size) {
				continue
			}
			if isTrustBundle(hdr) {
				// The egress CA each start appended goes; what the step
				// itself put in the bundle stays.
				b, err := io.ReadAll(tr)
				if err != nil {
					return err
				}
				if s, removed := egress.StripCA(b); removed {
					b = s
					hdr.Size = int64(len(b))
				}
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				if _, err := tw.Write(b); err != nil {
					return err
				}
				continue
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
		return tw.Close()
	})
}

// lineLog turns a step's output into one log message per line.
type lineLog struct {
	mu  sync.Mutex
	log func(string, ...any)
	buf []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		l.log("     %s", l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 8<<10 { // a long line without a newline
		l.log("     %s", l.buf)
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

func (l *lineLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.log("     %s", l.buf)
		l.buf = nil
	}
}
