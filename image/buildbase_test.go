package image

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/api"
)

// TestFinishAndPackRoundTrip checks the image policy and the packer on a
// small fake rootfs (no debootstrap): it must come back through Unpack with
// owners, modes, hardlinks and symlinks intact, device nodes gone.
func TestFinishAndPackRoundTrip(t *testing.T) {
	needRoot(t)
	src := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"etc", "dev", "usr/bin", "var/log/apt", "var/lib/apt/lists", "usr/share/doc/bash", "home/user"} {
		must(t, os.MkdirAll(filepath.Join(src, d), 0o755))
	}
	write := func(p, s string, mode os.FileMode) {
		must(t, os.WriteFile(filepath.Join(src, p), []byte(s), mode))
		must(t, os.Chmod(filepath.Join(src, p), mode))
	}
	write("etc/hostname", "buildhost\n", 0o644)
	write("etc/resolv.conf", "nameserver 10.0.0.1\n", 0o644)
	write("usr/bin/sudo", "ELF", 0o755|os.ModeSetuid)
	write("var/log/apt/history.log", "junk", 0o644)
	write("var/lib/apt/lists/x_Packages", "junk", 0o644)
	write("usr/share/doc/bash/copyright", "GPL", 0o644)
	write("usr/share/doc/bash/README", "docs", 0o644)
	must(t, os.Link(filepath.Join(src, "usr/bin/sudo"), filepath.Join(src, "usr/bin/sudoedit")))
	must(t, os.Symlink("usr/bin", filepath.Join(src, "bin")))
	must(t, os.Chown(filepath.Join(src, "home/user"), 1000, 1000))
	must(t, unix.Mknod(filepath.Join(src, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))

	must(t, finishRootfs(src))
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(context.Background(), src, pw)) }()
	dst := t.TempDir()
	must(t, Unpack(context.Background(), pr, dst, UnpackOptions{}))

	for _, gone := range []string{"etc/hostname", "dev/null", "var/log/apt/history.log", "var/lib/apt/lists/x_Packages", "usr/share/doc/bash/README"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !os.IsNotExist(err) {
			t.Errorf("%s should be gone: %v", gone, err)
		}
	}
	wantContent(t, filepath.Join(dst, "etc/resolv.conf"), "")
	wantContent(t, filepath.Join(dst, "usr/share/doc/bash/copyright"), "GPL")
	wantContent(t, filepath.Join(dst, "etc/sudoers.d/user"), "user ALL=(ALL) NOPASSWD:ALL\n")
	fi, err := os.Lstat(filepath.Join(dst, "usr/bin/sudo"))
	must(t, err)
	if fi.Mode()&os.ModeSetuid == 0 || fi.Sys().(*syscall.Stat_t).Nlink != 2 {
		t.Errorf("sudo: %v nlink %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Nlink)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "etc/sudoers.d/user")); err != nil || fi.Mode().Perm() != 0o440 {
		t.Errorf("sudoers mode: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "bin")); err != nil || l != "usr/bin" {
		t.Errorf("bin -> %q, %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "home/user")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("home owner: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "dev")); err != nil || !fi.IsDir() {
		t.Errorf("/dev dir should stay: %v", err)
	}
}

// TestBuildBase runs the real debootstrap build (minutes, needs the Debian
// mirror). Opt in with BERTH_TEST_BUILD_BASE=1; BERTH_TEST_IMAGE_ROOT keeps
// the store somewhere reusable.
func TestBuildBase(t *testing.T) {
	needRoot(t)
	if os.Getenv("BERTH_TEST_BUILD_BASE") != "1" {
		t.Skip("slow and needs the Debian mirror; set BERTH_TEST_BUILD_BASE=1")
	}
	root := os.Getenv("BERTH_TEST_IMAGE_ROOT")
	if root == "" {
		root = filepath.Join(t.TempDir(), "images")
	}
	s, err := Open(root)
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	lines := 0
	img, err := s.BuildBase(ctx, BuildBaseOptions{}, func(p api.Progress) {
		if p.Message != "" && p.Total == 0 {
			lines++
		}
	})
	must(t, err)
	t.Logf("built %s in %s: %d layer(s), %d MiB compressed, %d progress lines", img.Digest, time.Since(start).Round(time.Second), len(img.Layers), img.Size>>20, lines)
	if img.Name != "debian-trixie" || len(img.Layers) != 1 || lines < 10 {
		t.Errorf("image %+v, %d lines", img, lines)
	}
	if !IsCurrentBase(img.APIImage().Labels) {
		t.Errorf("built image does not carry the current recipe label: %v", img.Config.Labels)
	}
	got, err := s.Resolve(ctx, "debian-trixie")
	must(t, err)
	dirs, err := s.LayerDirs(ctx, got)
	must(t, err)
	l := dirs[0]
	passwd, _ := os.ReadFile(filepath.Join(l, "etc/passwd"))
	if !strings.Contains(string(passwd), "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("no user in passwd:\n%s", passwd)
	}
	wantContent(t, filepath.Join(l, "etc/resolv.conf"), "")
	if _, err := os.Lstat(filepath.Join(l, "etc/hostname")); !os.IsNotExist(err) {
		t.Errorf("/etc/hostname present")
	}

	// Run the tools through an overlay so the shared lower stays pristine.
	base := t.TempDir()
	up, work, mnt := filepath.Join(base, "u"), filepath.Join(base, "w"), filepath.Join(base, "m")
	for _, d := range []string{up, work, mnt} {
		must(t, os.Mkdir(d, 0o755))
	}
	must(t, unix.Mount("overlay", mnt, "overlay", 0, "lowerdir="+l+",upperdir="+up+",workdir="+work))
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	// The runtime provides /dev; tools like git need /dev/null.
	must(t, unix.Mknod(filepath.Join(mnt, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, os.Chmod(filepath.Join(mnt, "dev/null"), 0o666))
	for _, argv := range [][]string{
		{"/usr/bin/node", "-v"}, {"/usr/bin/npm", "--version"}, {"/usr/bin/python3", "-c", "print(1)"},
		{"/usr/bin/git", "--version"}, {"/usr/bin/curl", "--version"}, {"/usr/bin/sudo", "-u", "user", "sudo", "-n", "true"},
	} {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{mnt, "/usr/bin/env", "-i", basePath, "HOME=/root"}, argv...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%v: %v\n%s", argv, err, out)
		} else {
			t.Logf("%v: %s", argv, strings.TrimSpace(string(out)))
		}
	}
}

func TestBaseRecipeChangesWithPackages(t *testing.T) {
	before := BaseRecipe()
	if !IsCurrentBase(map[string]string{BaseRecipeLabel: before}) || IsCurrentBase(nil) {
		t.Fatal("IsCurrentBase does not compare the label")
	}
	saved := aptPackages
	defer func() { aptPackages = saved }()
	aptPackages = append(append([]string{}, saved...), "jq")
	if BaseRecipe() == before {
		t.Error("adding a package left the recipe unchanged; an old image would not be rebuilt")
	}
}
