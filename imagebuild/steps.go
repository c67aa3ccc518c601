package imagebuild

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"

	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

// apply executes one instruction, reporting whether its layer came from
// the cache.
func (bd *build) apply(ctx context.Context, st *state, c instructions.Command) (bool, error) {
	text := c.(fmt.Stringer).String()
	switch c := c.(type) {
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			st.cf.Config.Env = setEnv(st.cf.Config.Env, kv.Key, kv.Value)
		}
	case *instructions.ArgCommand:
		for _, kv := range c.Args {
			v, given := bd.req.BuildArgs[kv.Key]
			switch {
			case given:
			case kv.Value != nil:
				v = *kv.Value
			default:
				v = bd.meta[kv.Key]
			}
			st.args[kv.Key] = v
			text += "\x00" + kv.Key + "=" + v // the value is part of the key
		}
	case *instructions.LabelCommand:
		if st.cf.Config.Labels == nil {
			st.cf.Config.Labels = map[string]string{}
		}
		for _, kv := range c.Labels {
			st.cf.Config.Labels[kv.Key] = kv.Value
		}
	case *instructions.MaintainerCommand:
		st.cf.Author = c.Maintainer
	case *instructions.ExposeCommand:
		if st.cf.Config.ExposedPorts == nil {
			st.cf.Config.ExposedPorts = map[string]struct{}{}
		}
		for _, p := range c.Ports {
			p, err := bd.expand(p, stageEnv(st))
			if err != nil {
				return false, refuse(c, "%v", err)
			}
			port, proto, _ := strings.Cut(p, "/")
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return false, refuse(c, "bad port %q", p)
			}
			if proto == "" {
				proto = "tcp"
			}
			if proto != "tcp" && proto != "udp" && proto != "sctp" {
				return false, refuse(c, "bad protocol in %q", p)
			}
			st.cf.Config.ExposedPorts[port+"/"+proto] = struct{}{}
		}
	case *instructions.CmdCommand:
		st.cf.Config.Cmd = st.argv(c.ShellDependantCmdLine)
		st.cmdSet = true
	case *instructions.EntrypointCommand:
		st.cf.Config.Entrypoint = st.argv(c.ShellDependantCmdLine)
		if !st.cmdSet {
			st.cf.Config.Cmd = nil // an inherited CMD does not survive a new ENTRYPOINT
		}
	case *instructions.UserCommand:
		st.cf.Config.User = c.User
	case *instructions.ShellCommand:
		st.shell = append([]string(nil), c.Shell...)
	case *instructions.StopSignalCommand:
		st.cf.Config.StopSignal = c.Signal
	case *instructions.WorkdirCommand:
		return bd.workdir(ctx, st, c, text)
	case *instructions.CopyCommand:
		return bd.copy(ctx, st, c, c.SourcesAndDest, c.From, c.Chown, c.Chmod, false, text)
	case *instructions.AddCommand:
		return bd.copy(ctx, st, c, c.SourcesAndDest, "", c.Chown, c.Chmod, true, text)
	case *instructions.RunCommand:
		return bd.runStep(ctx, st, c, text)
	default:
		return false, refuse(c, "not supported")
	}
	st.key = chain(st.key, text)
	history(st, text, true)
	return false, nil
}

// argv is a CMD/ENTRYPOINT/RUN command line: exec form as is, shell form
// through the stage's SHELL.
func (st *state) argv(c instructions.ShellDependantCmdLine) []string {
	if !c.PrependShell {
		return append([]string(nil), c.CmdLine...)
	}
	return append(append([]string(nil), st.shell...), strings.Join(c.CmdLine, " "))
}

func setEnv(env []string, k, v string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if key, _, _ := strings.Cut(kv, "="); key != k {
			out = append(out, kv)
		}
	}
	return append(out, k+"="+v)
}

// abs makes p absolute against the stage's working directory.
func (st *state) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	wd := st.cf.Config.WorkingDir
	if wd == "" {
		wd = "/"
	}
	return path.Join(wd, p)
}

func (bd *build) workdir(ctx context.Context, st *state, c *instructions.WorkdirCommand, text string) (bool, error) {
	dir := st.abs(c.Path)
	st.cf.Config.WorkingDir = dir
	v, err := bd.view(ctx, st.layers)
	if err != nil {
		return false, err
	}
	exists := v.isDir(dir)
	var own owner
	if !exists {
		own, err = lookupOwner(v, st.cf.Config.User)
	}
	v.close()
	if err != nil {
		return false, refuse(c, "%v", err)
	}
	if exists || dir == "/" {
		st.key = chain(st.key, text)
		history(st, text, true)
		return false, nil
	}
	// Create it, owned by the stage's USER, as a layer of its own.
	stg, err := os.MkdirTemp(bd.tmp, "workdir-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(stg)
	d := filepath.Join(stg, filepath.FromSlash(dir))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return false, err
	}
	if err := os.Lchown(d, own.uid, own.gid); err != nil {
		return false, err
	}
	if err := fixDirTimes(stg); err != nil {
		return false, err
	}
	l, err := bd.b.opts.Images.AddDirLayer(ctx, stg)
	if err != nil {
		return false, err
	}
	return bd.addLayer(st, text, l)
}

// addLayer appends a layer made from inputs (COPY/ADD/WORKDIR): its key
// includes the layer's diff id, so what follows reruns exactly when the
// inputs changed.
func (bd *build) addLayer(st *state, text string, l image.Layer) (bool, error) {
	key := chain(st.key, text, l.DiffID)
	_, seen := bd.b.cache.get(key)
	if !seen {
		if err := bd.b.cache.put(key, l); err != nil {
			return false, err
		}
	}
	st.key = key
	st.layers = append(st.layers, l)
	history(st, text, false)
	return seen, nil
}

func (bd *build) copy(ctx context.Context, st *state, c instructions.Command, sd instructions.SourcesAndDest,
	from, chown, chmod string, isAdd bool, text string) (bool, error) {
	// The tree the sources come from: the context, a previous stage or
	// an image.
	srcFD := bd.ctxFD
	if from != "" {
		var layers []image.Layer
		if j, ok := bd.names[strings.ToLower(from)]; ok {
			layers = bd.stages[j].layers
		} else if n, err := strconv.Atoi(from); err == nil && n >= 0 && n < len(bd.stages) {
			layers = bd.stages[n].layers
		} else {
			img, err := bd.resolveImage(ctx, from)
			if err != nil {
				return false, refuse(c, "--from=%s: %v", from, err)
			}
			layers = img.LayerList()
		}
		v, err := bd.view(ctx, layers)
		if err != nil {
			return false, err
		}
		defer v.close()
		srcFD = v.fd
	}
	dv, err := bd.view(ctx, st.layers)
	if err != nil {
		return false, err
	}
	own, err := lookupOwner(dv, chown)
	destIsDir := strings.HasSuffix(sd.DestPath, "/") || sd.DestPath == "." || dv.isDir(st.abs(sd.DestPath))
	if err != nil {
		dv.close()
		return false, refuse(c, "--chown=%s: %v", chown, err)
	}
	stg, err := os.MkdirTemp(bd.tmp, "copy-")
	if err != nil {
		dv.close()
		return false, err
	}
	defer os.RemoveAll(stg)
	// The destination's existing parents keep the stage's owner and mode
	// (COPY into /tmp/ must not turn /tmp 0755).
	err = dv.mirrorParents(stg, st.abs(sd.DestPath), destIsDir)
	dv.close()
	if err != nil {
		return false, err
	}
	o := copyOpts{own: own}
	if chmod != "" {
		if o.mode, err = parseMode(chmod); err != nil {
			return false, refuse(c, "%v", err)
		}
	}
	srcs, err := expandSources(srcFD, sd.SourcePaths)
	if err != nil {
		return false, refuse(c, "%v", err)
	}
	if len(srcs) > 1 || len(sd.SourcePaths) > 1 {
		if !destIsDir {
			return false, refuse(c, "with several sources the destination must be a directory ending in /")
		}
	}
	dest := filepath.Join(stg, filepath.FromSlash(st.abs(sd.DestPath)))
	for _, rel := range srcs {
		target := dest
		if isAdd && isArchiveName(rel) {
			if err := bd.addArchive(ctx, srcFD, rel, dest, o); err != nil {
				return false, refuse(c, "%s: %v", rel, err)
			}
			continue
		}
		if destIsDir && !isDirIn(srcFD, rel) {
			target = filepath.Join(dest, path.Base(rel))
		}
		if err := copySource(srcFD, rel, target, o); err != nil {
			return false, refuse(c, "%v", err)
		}
	}
	if err := fixDirTimes(stg); err != nil {
		return false, err
	}
	l, err := bd.b.opts.Images.AddDirLayer(ctx, stg)
	if err != nil {
		return false, err
	}
	return bd.addLayer(st, text, l)
}

func isArchiveName(p string) bool {
	for _, s := range []string{".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.bz2"} {
		if strings.HasSuffix(p, s) {
			return true
		}
	}
	return false
}

// view merges layers' unpacked directories.
func (bd *build) view(ctx context.Context, layers []image.Layer) (*view, error) {
	dirs, err := bd.b.opts.Images.LayerDirs(ctx, layerImage(layers))
	if err != nil {
		return nil, err
	}
	return openView(bd.tmp, dirs)
}

func layerImage(layers []image.Layer) *image.Image {
	img := &image.Image{}
	for _, l := range layers {
		img.Layers = append(img.Layers, l.Blob)
		img.DiffIDs = append(img.DiffIDs, l.DiffID)
	}
	return img
}

// lookupOwner resolves "user[:group]" (names from the stage's own
// /etc/passwd and /etc/group, or numbers). "" is 0:0.
func lookupOwner(v *view, spec string) (owner, error) {
	if spec == "" {
		return owner{}, nil
	}
	u, g, hasGroup := strings.Cut(spec, ":")
	var o owner
	uid, primary, err := lookupID(v, "/etc/passwd", u, true)
	if err != nil {
		return o, err
	}
	o.uid, o.gid = uid, primary
	if hasGroup {
		if o.gid, _, err = lookupID(v, "/etc/group", g, false); err != nil {
			return o, err
		}
	}
	return o, nil
}

// lookupID finds name in a passwd or group file; for passwd it also
// returns the primary gid. A number needs no file (its gid is itself).
func lookupID(v *view, file, name string, passwd bool) (int, int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 && n < 1<<31 {
		return n, n, nil
	}
	b, err := v.readSmall(file, 4<<20)
	if err != nil {
		return 0, 0, errdefs.InvalidArgument("%q is not a number and the image has no %s", name, file)
	}
	for _, ln := range strings.Split(string(b), "\n") {
		f := strings.Split(ln, ":")
		if len(f) < 3 || f[0] != name {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			break
		}
		gid := id
		if passwd && len(f) > 3 {
			if gid, err = strconv.Atoi(f[3]); err != nil {
				gid = id
			}
		}
		return id, gid, nil
	}
	return 0, 0, errdefs.InvalidArgument("no %q in the image's %s", name, file)
}

// sortedArgs is the ARGs as KEY=VALUE, sorted, for keys and env.
func sortedArgs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
