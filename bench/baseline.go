package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/runtime"
)

// baselines runs the same work with plain tools. runc run uses a bundle
// built from the same image layers and the same container posture
// (seccomp, capabilities, namespaces) as berth's sandboxes.
func baselines(ctx context.Context, o Options, logf func(string, ...any)) Baselines {
	var b Baselines
	var notes []string
	if os.Geteuid() != 0 {
		notes = append(notes, "runc run baseline skipped: it needs root to mount the image")
	} else if o.Runtime != "" && o.DataDir != "" {
		st, err := runcRun(ctx, o, logf)
		if err != nil {
			notes = append(notes, "runc run baseline failed: "+err.Error())
		}
		b.RuncRun = st
	} else {
		notes = append(notes, "runc run baseline skipped (needs --data and a runc binary on this host)")
	}
	if dockerUp(ctx) {
		b.DockerRun, b.DockerExec = docker(ctx, o, logf)
	} else {
		notes = append(notes, "docker baselines: no Docker engine answers on this host")
	}
	b.Note = strings.Join(notes, "; ")
	return b
}

func runcRun(ctx context.Context, o Options, logf func(string, ...any)) (*Stat, error) {
	store, err := image.Open(filepath.Join(o.DataDir, "images"))
	if err != nil {
		return nil, err
	}
	img, err := store.Resolve(ctx, o.Image)
	if err != nil {
		return nil, err
	}
	layers, err := store.LayerDirs(ctx, img)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "berth-bench-runc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{rootfs, filepath.Join(dir, "upper"), filepath.Join(dir, "work")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(layers)-1-i] = l // overlay wants the top layer first
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lower, ":"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if err := unix.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("mount overlay: %w", err)
	}
	defer unix.Unmount(rootfs, unix.MNT_DETACH)
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, img.Config.Env...)
	spec, err := runtime.Spec(runtime.SpecOptions{
		ID: "bench", Hostname: "bench", RootfsPath: rootfs,
		Args: []string{"node", "-v"}, Env: env, Cwd: "/",
	})
	if err != nil {
		return nil, err
	}
	spec.Process.Terminal = false
	bundle := filepath.Join(dir, "bundle")
	if err := runtime.WriteBundle(bundle, spec); err != nil {
		return nil, err
	}
	root := filepath.Join(dir, "state")
	logf("baseline: %d × runc run node -v", o.N)
	var ds []time.Duration
	for i := 0; i < o.N; i++ {
		id := fmt.Sprintf("bench-runc-%d-%d", os.Getpid(), i)
		cmd := exec.CommandContext(ctx, o.Runtime, "--root", root, "run", "--bundle", bundle, id)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t0)
		if err != nil || !strings.HasPrefix(string(out), "v") {
			_ = exec.Command(o.Runtime, "--root", root, "delete", "--force", id).Run()
			return summarize(ds), fmt.Errorf("runc run: %v: %s", err, strings.TrimSpace(string(out)))
		}
		ds = append(ds, d)
	}
	return summarize(ds), nil
}

func dockerUp(ctx context.Context) bool {
	if _, err := exec.LookPath("docker"); err != nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return exec.CommandContext(cctx, "docker", "info").Run() == nil
}

// docker measures `docker run --rm IMAGE node -v` and `docker exec true`
// with the first local image that has node; nil when there is none.
func docker(ctx context.Context, o Options, logf func(string, ...any)) (*Stat, *Stat) {
	img := os.Getenv("BERTH_BENCH_DOCKER_IMAGE")
	if img == "" {
		img = "node:20-slim"
	}
	if exec.CommandContext(ctx, "docker", "image", "inspect", img).Run() != nil {
		logf("docker baseline: image %s not present locally; set BERTH_BENCH_DOCKER_IMAGE", img)
		return nil, nil
	}
	var runs, execs []time.Duration
	for i := 0; i < o.N; i++ {
		t0 := time.Now()
		if exec.CommandContext(ctx, "docker", "run", "--rm", img, "node", "-v").Run() != nil {
			break
		}
		runs = append(runs, time.Since(t0))
	}
	name := fmt.Sprintf("berth-bench-%d", os.Getpid())
	if exec.CommandContext(ctx, "docker", "run", "-d", "--name", name, img, "sleep", "600").Run() == nil {
		defer exec.Command("docker", "rm", "-f", name).Run()
		for i := 0; i < o.N; i++ {
			t0 := time.Now()
			if exec.CommandContext(ctx, "docker", "exec", name, "true").Run() != nil {
				break
			}
			execs = append(execs, time.Since(t0))
		}
	}
	return summarize(runs), summarize(execs)
}
