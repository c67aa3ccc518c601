package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// BuildBaseOptions configures BuildBase. Zero values take the defaults.
type BuildBaseOptions struct {
	Name     string // default "debian-trixie"
	Suite    string // default "trixie"
	Mirror   string // default http://deb.debian.org/debian
	CacheDir string // .deb cache for repeat builds; default <root>/../cache/debootstrap
}

// Packages of the default base image. debootstrap installs basePackages;
// aptPackages go in through apt inside the new rootfs afterwards, because
// debootstrap's resolver ignores virtual packages (Provides:) and npm's
// dependency tree in trixie needs them.
var (
	basePackages = []string{
		"bash", "coreutils", "ca-certificates", "curl", "git", "nodejs", "python3",
		"procps", "sudo", "less", "netbase", "xz-utils", "bzip2", "unzip", "iproute2",
	}
	// numpy, pandas and matplotlib back the python code contexts
	// (agent/interp): data analysis and charts out of the box.
	// ipykernel and jupyter-client are the IPython kernel a python context
	// runs (agent/interp/kernels/python_kernel.py drives it over the Jupyter
	// protocol); python-is-python3 gives the image a `python` command.
	aptPackages = []string{"npm", "python3-pip", "python3-venv", "python3-numpy", "python3-pandas", "python3-matplotlib",
		"python3-ipykernel", "python3-jupyter-client", "python-is-python3"}
)

// BaseRecipeLabel is the image label where BuildBase records BaseRecipe.
const BaseRecipeLabel = "sh.berth.base-recipe"

// baseRecipeVersion changes whenever finishRootfs or the build steps
// change in a way that matters to sandboxes; the package lists are hashed
// in by BaseRecipe.
const baseRecipeVersion = 3

// BaseRecipe identifies what BuildBase builds: its version and package
// lists. An image whose label differs was built by an older berth and
// lacks something this one expects (build-base --if-stale rebuilds it).
func BaseRecipe() string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\n%s\n%s\n", baseRecipeVersion, strings.Join(basePackages, ","), strings.Join(aptPackages, ","))
	return fmt.Sprintf("v%d-%x", baseRecipeVersion, h.Sum(nil)[:6])
}

// IsCurrentBase reports whether an image with these labels was built by
// this berth's BuildBase recipe.
func IsCurrentBase(labels map[string]string) bool {
	return labels[BaseRecipeLabel] == BaseRecipe()
}

const basePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BuildBase builds the default image from Debian packages with debootstrap
// (no registry needed): minbase plus basePackages and aptPackages, a user
// "user" (uid 1000, /home/user, bash) with passwordless sudo, apt caches,
// logs and docs trimmed, no /etc/hostname, an empty regular
// /etc/resolv.conf. The rootfs becomes ONE zstd layer (see writeLayer) and
// the image is stored under opts.Name. debootstrap's output is streamed as
// progress messages. Needs root.
func (s *Store) BuildBase(ctx context.Context, opts BuildBaseOptions, progress func(api.Progress)) (*Image, error) {
	if opts.Name == "" {
		opts.Name = "debian-trixie"
	}
	if opts.Suite == "" {
		opts.Suite = "trixie"
	}
	if opts.Mirror == "" {
		opts.Mirror = "http://deb.debian.org/debian"
	}
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(filepath.Dir(filepath.Clean(s.root)), "cache", "debootstrap")
	}
	if err := ValidateName(opts.Name); err != nil {
		return nil, err
	}
	for _, v := range []string{opts.Suite, opts.Mirror} {
		if v == "" || strings.ContainsAny(v, " \t\n'\"") || strings.HasPrefix(v, "-") {
			return nil, errdefs.InvalidArgument("invalid suite or mirror %q", v)
		}
	}
	if os.Geteuid() != 0 {
		return nil, errdefs.PermissionDenied("building the base image needs root (debootstrap)")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		return nil, errdefs.FailedPrecondition("debootstrap is not installed (apt-get install debootstrap)")
	}
	cache, err := filepath.Abs(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	rep := &reporter{fn: progress}
	start := time.Now()

	work, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	rootfs := filepath.Join(work, "rootfs")

	args := []string{"--variant=minbase", "--include=" + strings.Join(basePackages, ","), "--cache-dir=" + cache}
	if kr := "/usr/share/keyrings/debian-archive-keyring.gpg"; fileExists(kr) {
		args = append(args, "--keyring="+kr)
	}
	args = append(args, opts.Suite, rootfs, opts.Mirror)
	rep.msg("debootstrap %s", strings.Join(args, " "))
	if err := runLogged(ctx, rep, "debootstrap", args...); err != nil {
		return nil, fmt.Errorf("debootstrap: %w", err)
	}

	// From here on commands run inside the new rootfs. It was just built
	// from signed Debian packages, so running its binaries is no more
	// trust than debootstrap's own chrooted maintainer scripts.
	policy := filepath.Join(rootfs, "usr/sbin/policy-rc.d")
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return nil, err
	}
	inRoot := func(argv ...string) error {
		env := []string{basePath, "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8", "HOME=/root"}
		a := append([]string{rootfs, "/usr/bin/env", "-i"}, env...)
		return runLogged(ctx, rep, "chroot", append(a, argv...)...)
	}
	// apt shares the .deb cache with debootstrap (same file names), so a
	// rebuild downloads nothing, and a flaky mirror costs only the retry.
	archives := filepath.Join(rootfs, "var/cache/apt/archives")
	syncDebs(cache, archives)
	install := append([]string{"apt-get", "install", "-y", "--no-install-recommends",
		"-o", "Dpkg::Use-Pty=0", "-o", "Acquire::Retries=5"}, aptPackages...)
	for attempt := 1; ; attempt++ {
		rep.msg("+ %s", strings.Join(install, " "))
		err := inRoot(install...)
		syncDebs(archives, cache)
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			return nil, fmt.Errorf("apt-get install: %w", err)
		}
		rep.msg("apt-get failed (%v); retrying", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt) * 10 * time.Second):
		}
	}
	steps := [][]string{
		{"apt-get", "clean"},
		{"useradd", "--create-home", "--uid", "1000", "--user-group", "--shell", "/bin/bash", "user"},
	}
	for _, st := range steps {
		rep.msg("+ %s", strings.Join(st, " "))
		if err := inRoot(st...); err != nil {
			return nil, fmt.Errorf("%s: %w", st[0], err)
		}
	}
	if err := finishRootfs(rootfs); err != nil {
		return nil, err
	}
	rep.msg("rootfs ready after %s; packing the layer", time.Since(start).Round(time.Second))
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()

	lb, err := s.writeLayer(ctx, func(w io.Writer) error { return tarDir(ctx, rootfs, w) },
		func(n int64) { rep.bytes("compressing layer", n, 0) })
	if err != nil {
		return nil, fmt.Errorf("pack rootfs: %w", err)
	}
	diff, _ := v1.NewHash(lb.diffID)
	cfg := v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: time.Now().UTC().Truncate(time.Second)},
		Config: v1.Config{
			Env:        []string{basePath, "LANG=C.UTF-8"},
			WorkingDir: "/",
			Cmd:        []string{"/bin/bash"},
			Labels:     map[string]string{BaseRecipeLabel: BaseRecipe()},
		},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diff}},
		History: []v1.History{{Created: v1.Time{Time: time.Now().UTC().Truncate(time.Second)}, CreatedBy: "berth image build-base (debootstrap " + opts.Suite + ")"}},
	}
	rawConfig, err := json.Marshal(&cfg)
	if err != nil {
		return nil, err
	}
	mraw, err := s.buildManifest(ctx, rawConfig, []v1.Descriptor{lb.desc})
	if err != nil {
		return nil, err
	}
	img, err := s.commit(ctx, mraw, "", opts.Name, rep)
	if err != nil {
		return nil, err
	}
	if img, err = s.published(ctx, img, opts.Name, rep); err != nil {
		return nil, err
	}
	rep.msg("built %s (%s, %d MB compressed) in %s", opts.Name, img.Digest, img.Size>>20, time.Since(start).Round(time.Second))
	return img, nil
}

// finishRootfs applies the image policy to a fresh debootstrap rootfs.
func finishRootfs(rootfs string) error {
	p := func(rel string) string { return filepath.Join(rootfs, rel) }
	if err := os.MkdirAll(p("etc/sudoers.d"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p("etc/sudoers.d/user"), []byte("user ALL=(ALL) NOPASSWD:ALL\n"), 0o440); err != nil {
		return err
	}
	if err := os.Chmod(p("etc/sudoers.d/user"), 0o440); err != nil {
		return err
	}
	// The runtime provides hostname and DNS per sandbox.
	for _, f := range []string{"etc/hostname", "etc/resolv.conf", "usr/sbin/policy-rc.d"} {
		if err := os.Remove(p(f)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.WriteFile(p("etc/resolv.conf"), nil, 0o644); err != nil {
		return err
	}
	// Emptied, not removed: caches, lists, logs, docs, device nodes (the
	// runtime mounts its own /dev) and scratch dirs.
	for _, d := range []string{"var/cache/apt", "var/lib/apt/lists", "var/log", "dev", "tmp", "var/tmp",
		"usr/share/man", "usr/share/info", "usr/share/locale", "root/.cache"} {
		if err := emptyDir(p(d), nil); err != nil {
			return err
		}
	}
	// Docs go too, except the copyright notices.
	return emptyDir(p("usr/share/doc"), func(rel string) bool { return filepath.Base(rel) == "copyright" })
}

// emptyDir deletes everything under dir except files keep approves (their
// parent dirs stay). os.RemoveAll never follows symlinks.
func emptyDir(dir string, keep func(rel string) bool) error {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		full := filepath.Join(dir, e.Name())
		if keep != nil && e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			if err := emptyDir(full, func(rel string) bool { return keep(filepath.Join(e.Name(), rel)) }); err != nil {
				return err
			}
			if left, _ := os.ReadDir(full); len(left) > 0 {
				continue
			}
		}
		if keep != nil && keep(e.Name()) {
			continue
		}
		if err := os.RemoveAll(full); err != nil {
			return err
		}
	}
	return nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// runLogged runs a command, streaming its merged output as progress
// messages. On ctx cancel the whole process group is killed.
func runLogged(ctx context.Context, rep *reporter, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{basePath, "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tail []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			rep.msg("%s", line)
			if tail = append(tail, line); len(tail) > 20 {
				tail = tail[1:]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errdefs.Internal("%s failed: %w; last output:\n%s", name, err, strings.Join(tail, "\n"))
	}
	return nil
}

// syncDebs copies the .deb files of from that to lacks (best effort: a
// cache miss only costs a download).
func syncDebs(from, to string) {
	ents, err := os.ReadDir(from)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".deb") || fileExists(filepath.Join(to, e.Name())) {
			continue
		}
		src, dst := filepath.Join(from, e.Name()), filepath.Join(to, e.Name())
		if os.Link(src, dst) == nil {
			continue
		}
		if b, err := os.ReadFile(src); err == nil {
			tmp := dst + ".part"
			if os.WriteFile(tmp, b, 0o644) == nil {
				os.Rename(tmp, dst)
			}
		}
	}
}
