package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/image"
)

// dockerTask runs the task steps with Docker: the image is berth's base
// image (its layers, merged by a read-only overlay) given to `docker
// import`, tagged with its digest so later runs reuse it. The engine here
// runs with --bridge=none, so containers use --network host and the dev
// server (on 127.0.0.1:<free port>) is reached directly from the host: no
// proxy, the cheapest path Docker has. Every step is a docker CLI call, as
// a user would script it.
func dockerTask(ctx context.Context, t *taskRun) ([]TaskScenario, error) {
	if os.Geteuid() != 0 || t.o.DataDir == "" {
		return nil, fmt.Errorf("importing berth's base layer needs root and the data dir")
	}
	img, err := dockerImportBase(ctx, t)
	if err != nil {
		return nil, err
	}
	var out []TaskScenario
	dk := func(args ...string) (string, error) { return dockerCmd(ctx, nil, args...) }
	var made []string
	defer func() {
		for _, n := range made {
			_, _ = dockerCmd(context.WithoutCancel(ctx), nil, "rm", "-f", n)
		}
	}()
	run := func(name, image string) func() error {
		return func() error {
			made = append(made, name)
			_, err := dk("run", "-d", "--network", "host", "--name", name, image, "sleep", "infinity")
			return err
		}
	}

	zero := TaskScenario{Name: TaskZero, Label: "docker: run, upload + unpack the deps tarball"}
	t.logf("task: docker from zero, %d samples", t.o.N)
	for i := 0; i < t.o.N; i++ {
		name := fmt.Sprintf("berth-bench-task-%s-zero-%d", t.run, i)
		s, err := t.dockerSample(ctx, name, run(name, img), true)
		_, _ = dk("rm", "-f", name)
		if err != nil {
			return out, err
		}
		zero.samples = append(zero.samples, s)
	}
	out = append(out, zero)

	src := fmt.Sprintf("berth-bench-task-%s-src", t.run)
	if _, err := t.dockerSample(ctx, src, run(src, img), true); err != nil {
		return out, err
	}
	ready := "berth-bench-task-ready:" + t.run
	if _, err := dk("commit", src, ready); err != nil {
		return out, err
	}
	defer dockerCmd(context.WithoutCancel(ctx), nil, "rmi", "-f", ready)
	snap := TaskScenario{Name: TaskSnapshot, Label: "docker: commit of a ready workspace, run"}
	t.logf("task: docker from a commit, %d samples", t.o.N)
	for i := 0; i < t.o.N; i++ {
		name := fmt.Sprintf("berth-bench-task-%s-snap-%d", t.run, i)
		s, err := t.dockerSample(ctx, name, run(name, ready), false)
		_, _ = dk("rm", "-f", name)
		if err != nil {
			return out, err
		}
		snap.samples = append(snap.samples, s)
	}
	out = append(out, snap)

	wake := TaskScenario{Name: TaskWake, Label: "docker: stop (untimed), start"}
	t.logf("task: docker stop + start, %d samples", t.o.N)
	for i := 0; i < t.o.N; i++ {
		if _, err := dk("stop", "-t", "0", src); err != nil {
			return out, err
		}
		s, err := t.dockerSample(ctx, src, func() error { _, err := dk("start", src); return err }, false)
		if err != nil {
			return out, err
		}
		wake.samples = append(wake.samples, s)
	}
	out = append(out, wake)
	return out, nil
}

// dockerSample is sample's Docker twin: start (docker run or start), the
// shell (docker exec echo), deps (upload by docker exec -i, unpack, or
// only the check), the app (docker exec -d node server.js, then GET
// http://127.0.0.1:port/ from the host until it answers the body).
func (t *taskRun) dockerSample(ctx context.Context, name string, start func() error, unpack bool) (TaskSample, error) {
	var s TaskSample
	port, err := freeTCPPort()
	if err != nil {
		return s, err
	}
	t0 := time.Now()
	if err := start(); err != nil {
		return s, err
	}
	if out, err := dockerCmd(ctx, nil, "exec", name, "sh", "-c", "echo shell-ok"); err != nil || out != "shell-ok\n" {
		return s, fmt.Errorf("docker shell in %s: %q %v", name, out, err)
	}
	s.Shell = ms(time.Since(t0))
	script := checkScript(t.w)
	if unpack {
		if _, err := dockerCmd(ctx, t.w.Tarball, "exec", "-i", name, "sh", "-c", "mkdir -p /home/user && cat > "+taskDeps); err != nil {
			return s, err
		}
		script = unpackScript(t.w)
	}
	out, err := dockerCmd(ctx, nil, "exec", name, "sh", "-c", script)
	if err != nil || strings.TrimSpace(out) != t.w.PyValue {
		return s, fmt.Errorf("docker deps in %s (want %s): %q %v", name, t.w.PyValue, out, err)
	}
	s.Deps = ms(time.Since(t0))
	tb := time.Now()
	if _, err := dockerCmd(ctx, nil, "exec", "-d", "-w", taskAppDir, "-e", "PORT="+strconv.Itoa(port), name, "node", "server.js"); err != nil {
		return s, err
	}
	if err := t.getApp(ctx, fmt.Sprintf("http://127.0.0.1:%d/", port)); err != nil {
		return s, fmt.Errorf("docker dev server of %s: %w", name, err)
	}
	// No wait-port here: the first answer is the end of the boot.
	s.Boot = ms(time.Since(tb))
	s.App = ms(time.Since(t0))
	return s, nil
}

func dockerCmd(ctx context.Context, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args[:min(len(args), 3)], " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// dockerImportBase gives Docker berth's image (o.Image from the data
// dir's store) as berth-bench-task:<digest>, importing it once.
func dockerImportBase(ctx context.Context, t *taskRun) (string, error) {
	store, err := image.Open(filepath.Join(t.o.DataDir, "images"))
	if err != nil {
		return "", err
	}
	img, err := store.Resolve(ctx, t.o.Image)
	if err != nil {
		return "", err
	}
	tag := "berth-bench-task:" + strings.TrimPrefix(img.Digest, "sha256:")[:12]
	if _, err := dockerCmd(ctx, nil, "image", "inspect", tag); err == nil {
		return tag, nil
	}
	layers, err := store.LayerDirs(ctx, img)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "berth-bench-import-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	lower := make([]string, len(layers))
	for i, l := range layers {
		lower[len(layers)-1-i] = l
	}
	root := dir
	if len(lower) == 1 {
		// A read-only overlay needs two lowers; one layer is its own tree.
		root = lower[0]
	} else if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lower, ":")); err != nil {
		return "", fmt.Errorf("mount the image's layers: %w", err)
	} else {
		defer unix.Unmount(root, unix.MNT_DETACH)
	}
	t.logf("task: docker import of %s's layers as %s (once per image digest)", t.o.Image, tag)
	args := []string{"import"}
	for _, e := range append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, img.Config.Env...) {
		k, v, _ := strings.Cut(e, "=")
		args = append(args, "-c", "ENV "+k+" "+v)
	}
	args = append(args, "-", tag)
	cmd := exec.CommandContext(ctx, "sh", append([]string{"-c", `d="$1"; shift; tar -C "$d" --numeric-owner -cf - . | docker "$@"`, "sh", root}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("docker import: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return tag, nil
}
