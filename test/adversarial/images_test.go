//go:build adversarial

package adversarial

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/weaken"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// layerTar builds one uncompressed layer from headers; a regular file's
// body is its Linkname field's text when Size is set (a shorthand).
func layerTar(t *testing.T, hdrs []*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body, h.Linkname = h.Linkname, ""
			h.Size = int64(len(body))
			if h.Mode == 0 {
				h.Mode = 0o644
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	return b.Bytes()
}

// imageTar wraps layers (and an optional config edit) in a docker-save
// tarball for the import API.
func imageTar(t *testing.T, layers [][]byte, cfg func(*v1.Config)) []byte {
	t.Helper()
	img := empty.Image
	for _, data := range layers {
		data := data
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	if cfg != nil {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		cfg(&c)
		if img, err = mutate.Config(img, c); err != nil {
			t.Fatal(err)
		}
	}
	ref, _ := name.NewTag("hostile:latest")
	var out bytes.Buffer
	if err := tarball.Write(ref, img, &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func reg(name, body string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeReg, Linkname: body}
}
func dirent(name string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755}
}
func symlink(name, target string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}
}
func hardlink(name, target string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}
}

// zipSlip is one hostile image: its layers aim at the canary directory c
// (which holds the file "secret") and at the file victim (for hardlinks).
type zipSlip struct {
	name  string
	naive bool // a naive unpacker is caught by it (the negative control)
	layer func(c, victim string) [][]*tar.Header
}

var zipSlips = []zipSlip{
	{"dotdot", true, func(c, _ string) [][]*tar.Header {
		return [][]*tar.Header{{reg("../../../../../../../../../.."+c+"/secret", "pwned")}}
	}},
	{"absolute", false, func(c, _ string) [][]*tar.Header { return [][]*tar.Header{{reg(c+"/secret", "pwned")}} }},
	{"symlink dir then file", true, func(c, _ string) [][]*tar.Header {
		return [][]*tar.Header{{symlink("e", c), reg("e/secret", "pwned")}}
	}},
	{"symlink dir then file, next layer", true, func(c, _ string) [][]*tar.Header {
		return [][]*tar.Header{{symlink("e", c)}, {reg("e/secret", "pwned")}}
	}},
	{"hardlink to victim", true, func(_, v string) [][]*tar.Header { return [][]*tar.Header{{hardlink("x", v)}} }},
	{"hardlink through symlinked dir", true, func(_, v string) [][]*tar.Header {
		return [][]*tar.Header{{symlink("l", filepath.Dir(v)), hardlink("x", "l/"+filepath.Base(v))}}
	}},
	{"whiteout through symlinked dir", true, func(c, _ string) [][]*tar.Header {
		return [][]*tar.Header{{symlink("s", c)}, {reg("s/.wh.secret", "")}}
	}},
	{"opaque through symlinked dir", true, func(c, _ string) [][]*tar.Header {
		return [][]*tar.Header{{symlink("s", c)}, {reg("s/.wh..wh..opq", "")}}
	}},
	{"whiteout of dotdot", false, func(string, string) [][]*tar.Header {
		return [][]*tar.Header{{dirent("a/"), reg("a/.wh..", "")}}
	}},
	{"whiteout through dotdot", true, func(c, _ string) [][]*tar.Header {
		return [][]*tar.Header{{reg("../../../../../../../../../.."+filepath.Dir(c)+"/.wh."+filepath.Base(c), "")}}
	}},
}

// canaryState is what must not change: the canary dir's files and the
// victim's link count.
func canaryState(c, victim string) string {
	var b strings.Builder
	ents, _ := os.ReadDir(c)
	for _, e := range ents {
		data, _ := os.ReadFile(filepath.Join(c, e.Name()))
		b.WriteString(e.Name() + "=" + string(data) + ";")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(victim, &st); err == nil {
		b.WriteString("nlink=" + strconv.FormatUint(uint64(st.Nlink), 10))
	} else {
		b.WriteString("victim " + err.Error())
	}
	return b.String()
}

// naiveUnpack is the negative control's unpacker: filepath.Join and the
// kernel's path walk, links honoured, whiteouts as deletes. It is what the
// real unpacker must not be.
func naiveUnpack(root string, layers [][]*tar.Header) {
	for _, l := range layers {
		for _, h := range l {
			p := filepath.Join(root, h.Name)
			dir, base := filepath.Split(p)
			switch {
			case base == ".wh..wh..opq":
				ents, _ := os.ReadDir(dir)
				for _, e := range ents {
					os.RemoveAll(filepath.Join(dir, e.Name()))
				}
			case strings.HasPrefix(base, ".wh."):
				os.RemoveAll(dir + strings.TrimPrefix(base, ".wh."))
			case h.Typeflag == tar.TypeDir:
				os.MkdirAll(p, 0o755)
			case h.Typeflag == tar.TypeReg:
				os.WriteFile(p, []byte(h.Linkname), 0o644)
			case h.Typeflag == tar.TypeSymlink:
				os.Symlink(h.Linkname, p)
			case h.Typeflag == tar.TypeLink:
				target := h.Linkname
				if !filepath.IsAbs(target) {
					target = filepath.Join(root, target)
				}
				os.Link(target, p)
			}
		}
	}
}

func makeCanaryDir(t *testing.T, c string) {
	t.Helper()
	if err := os.MkdirAll(c, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c, "secret"), []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestZipSlipLayers imports hostile images through the API: each is
// refused or unpacked confined, the host canary dir is untouched and
// /etc/shadow's link count is unchanged (checklist #1-3). Negative
// control: the same layers through a naive unpacker into a scratch root
// disturb a scratch canary, so every layer really is hostile.
func TestZipSlipLayers(t *testing.T) {
	ctx := context.Background()
	c := filepath.Join(filepath.Dir(dataDir), "berth-adv-canarydir"+advID)
	makeCanaryDir(t, c)
	defer os.RemoveAll(c)
	victim := "/etc/shadow"
	for _, z := range zipSlips {
		t.Run(strings.ReplaceAll(z.name, " ", "_"), func(t *testing.T) {
			before := canaryState(c, victim)
			var layers [][]byte
			for _, l := range z.layer(c, victim) {
				layers = append(layers, layerTar(t, l))
			}
			img, err := d.c.ImportImage(ctx, "adv-zipslip", bytes.NewReader(imageTar(t, layers, nil)), nil)
			if err == nil {
				d.c.RemoveImage(ctx, "adv-zipslip")
				t.Logf("accepted (confined): %s", img.Digest)
			} else {
				t.Logf("refused: %v", err)
			}
			if after := canaryState(c, victim); after != before {
				t.Fatalf("host canary changed: %q -> %q", before, after)
			}
			checkCanaries(t)
			if !z.naive {
				return
			}
			// Negative control.
			tmp := t.TempDir()
			root, sc, sv := filepath.Join(tmp, "x", "root"), filepath.Join(tmp, "canary"), filepath.Join(tmp, "victim")
			os.MkdirAll(root, 0o755)
			makeCanaryDir(t, sc)
			os.WriteFile(sv, []byte("victim"), 0o600)
			nb := canaryState(sc, sv)
			naiveUnpack(root, z.layer(sc, sv))
			if na := canaryState(sc, sv); na == nb {
				t.Fatalf("negative control: the naive unpacker left the scratch canary alone (%q)", na)
			}
		})
	}
}

// TestSymlinkedProcDev: images that ship /proc, /dev, /sys, /dev/null or
// /dev/pts as symlinks (CVE-2019-19921, CVE-2025-31133) either fail to
// start or start with every kernel path still masked (checklist #5).
// Negative control: with masked paths off the same check sees the holes
// in such a sandbox.
func TestSymlinkedProcDev(t *testing.T) {
	ctx := context.Background()
	self, err := os.ReadFile(probeBin)
	if err != nil {
		t.Fatal(err)
	}
	base := func(extra ...*tar.Header) []byte {
		h := []*tar.Header{dirent("etc/"), reg("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), reg("etc/group", "root:x:0:\n"), dirent("tmp/"), dirent("tmp/fake/"), dirent("tmp/fake/sys/"), dirent("home/"), dirent("home/user/"),
			{Name: "home/user/probe", Typeflag: tar.TypeReg, Mode: 0o755, Linkname: string(self)}}
		return layerTar(t, append(h, extra...))
	}
	cases := map[string][]*tar.Header{
		"proc to tmp":     {symlink("proc", "/tmp/fake")},
		"proc to root":    {symlink("proc", "/")},
		"dev to tmp":      {symlink("dev", "/tmp/fake")},
		"sys to tmp":      {symlink("sys", "/tmp/fake/sys")},
		"devnull to core": {dirent("dev/"), symlink("dev/null", "/proc/sys/kernel/core_pattern")},
		"devpts to tmp":   {dirent("dev/"), symlink("dev/pts", "/tmp/fake")},
	}
	started := 0
	for nm, extra := range cases {
		t.Run(strings.ReplaceAll(nm, " ", "_"), func(t *testing.T) {
			if _, err := d.c.ImportImage(ctx, "adv-symproc", bytes.NewReader(imageTar(t, [][]byte{base(extra...)}, nil)), nil); err != nil {
				t.Logf("import refused: %v", err)
				return
			}
			defer d.c.RemoveImage(ctx, "adv-symproc")
			if _, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: "adv-symproc", Image: "adv-symproc"}); err != nil {
				t.Logf("start refused (fails closed): %v", err)
				d.c.Destroy(ctx, "adv-symproc")
				return
			}
			defer d.c.Destroy(ctx, "adv-symproc")
			started++
			var k map[string]string
			probe(t, "adv-symproc", "root", &k, "kpaths")
			if bad := kernelPathProblems(k); len(bad) > 0 {
				t.Errorf("started with kernel paths open: %v", bad)
			}
			var p postureVerdict
			probe(t, "adv-symproc", "root", &p, "posture")
			if p.Seccomp != "2" || p.NoNewPrivs != "1" {
				t.Errorf("started weaker: %+v", p)
			}
			checkCanaries(t)
		})
	}
	t.Logf("%d of %d symlinked-kernel-dir images started (confined); the rest were refused", started, len(cases))
	t.Run("negative/"+weaken.MaskedPaths, func(t *testing.T) {
		withWeakened(t, weaken.MaskedPaths, func() {
			if _, err := d.c.ImportImage(ctx, "adv-symproc", bytes.NewReader(imageTar(t, [][]byte{base(dirent("proc/"), dirent("dev/"))}, nil)), nil); err != nil {
				t.Fatal(err)
			}
			defer d.c.RemoveImage(ctx, "adv-symproc")
			if _, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: "adv-symproc-weak", Image: "adv-symproc"}); err != nil {
				t.Fatal(err)
			}
			defer d.c.Destroy(ctx, "adv-symproc-weak")
			var k map[string]string
			probe(t, "adv-symproc-weak", "root", &k, "kpaths")
			if bad := kernelPathProblems(k); len(bad) == 0 {
				t.Fatalf("with masked paths off the probe saw nothing: %v", k)
			}
		})
	})
}

// TestImageWorkdirProcFd: an image whose WORKDIR is /proc/self/fd/N starts
// (berth never uses the image's WORKDIR for its processes) or is refused;
// no process of the sandbox has a working directory outside its root
// (checklist #4, image half).
func TestImageWorkdirProcFd(t *testing.T) {
	ctx := context.Background()
	self, _ := os.ReadFile(probeBin)
	layer := layerTar(t, []*tar.Header{dirent("etc/"), reg("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), reg("etc/group", "root:x:0:\n"), dirent("tmp/"), dirent("home/"), dirent("home/user/"),
		{Name: "home/user/probe", Typeflag: tar.TypeReg, Mode: 0o755, Linkname: string(self)}})
	for _, n := range []string{"3", "5", "7", "8", "10"} {
		img := imageTar(t, [][]byte{layer}, func(c *v1.Config) { c.WorkingDir = "/proc/self/fd/" + n })
		if _, err := d.c.ImportImage(ctx, "adv-workdir", bytes.NewReader(img), nil); err != nil {
			t.Logf("fd %s: import refused: %v", n, err)
			continue
		}
		sb, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: "adv-workdir", Image: "adv-workdir"})
		if err == nil {
			hostCwdCheck(t, sb)
			d.c.Destroy(ctx, "adv-workdir")
		} else {
			t.Logf("fd %s: start refused: %v", n, err)
			d.c.Destroy(ctx, "adv-workdir")
		}
		d.c.RemoveImage(ctx, "adv-workdir")
	}
}

// hostCwdCheck finds, from the host, every process of the sandbox (by its
// cgroup) and walks ".." up from its working directory: the walk must meet
// the process's root before it reaches the top of the host's tree.
func hostCwdCheck(t *testing.T, sb api.Sandbox) {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	seen := 0
	for _, e := range ents {
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !strings.Contains(string(cg), sb.ID) {
			continue
		}
		seen++
		if inside, why := cwdInsideRoot("/proc/" + e.Name()); !inside {
			t.Errorf("pid %s of %s: working directory outside its root (%s)", e.Name(), sb.Name, why)
		}
	}
	if seen == 0 {
		t.Errorf("no process of %s found from the host (cgroup naming %s)", sb.Name, sb.ID)
	}
}

func cwdInsideRoot(proc string) (bool, string) {
	var root, cur, up syscall.Stat_t
	if err := syscall.Stat(proc+"/root", &root); err != nil {
		return true, "process gone: " + err.Error()
	}
	p := proc + "/cwd"
	for i := 0; i < 512; i++ {
		if err := syscall.Stat(p, &cur); err != nil {
			return true, "process gone: " + err.Error()
		}
		if cur.Dev == root.Dev && cur.Ino == root.Ino {
			return true, ""
		}
		if err := syscall.Stat(p+"/..", &up); err != nil {
			return true, "process gone: " + err.Error()
		}
		if up.Dev == cur.Dev && up.Ino == cur.Ino {
			return false, "reached the host's top directory"
		}
		p += "/.."
	}
	return false, "too deep"
}

// TestImageVolumesIgnored: an image's VOLUME entries with `..`, absolute
// host paths, /proc magic links or a symlink to a host directory create
// nothing on the host (berth makes no mounts from image config; checklist
// #6). Negative control: a host-side join of the same volumes under a
// rootfs with the same symlink creates a directory outside it.
func TestImageVolumesIgnored(t *testing.T) {
	ctx := context.Background()
	self, _ := os.ReadFile(probeBin)
	hostPath := "/var/tmp/berth-adv-volume" + advID
	os.RemoveAll(hostPath)
	if err := os.Mkdir(hostPath, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hostPath)
	layer := layerTar(t, []*tar.Header{dirent("etc/"), reg("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), dirent("tmp/"),
		symlink("vol", hostPath), {Name: "probe", Typeflag: tar.TypeReg, Mode: 0o755, Linkname: string(self)}})
	volumes := func(target string) map[string]struct{} {
		return map[string]struct{}{"/../../../../" + target: {}, "/vol/x": {}, "/proc/self/root" + target: {}}
	}
	img := imageTar(t, [][]byte{layer}, func(c *v1.Config) { c.Volumes = volumes(hostPath) })
	if _, err := d.c.ImportImage(ctx, "adv-volumes", bytes.NewReader(img), nil); err != nil {
		t.Fatalf("import: %v", err)
	}
	defer d.c.RemoveImage(ctx, "adv-volumes")
	if _, err := d.c.Create(ctx, api.CreateSandboxRequest{Name: "adv-volumes", Image: "adv-volumes"}); err != nil {
		t.Logf("start refused: %v", err)
	}
	defer d.c.Destroy(ctx, "adv-volumes")
	if ents, _ := os.ReadDir(hostPath); len(ents) > 0 {
		t.Fatalf("an image volume created %s/%s on the host", hostPath, ents[0].Name())
	}
	checkCanaries(t)
	// Negative control: creating the volume directories with a host-side
	// join under a rootfs holding the same "vol" symlink escapes it.
	t.Run("negative/naive-volumes", func(t *testing.T) {
		tmp := t.TempDir()
		root, target := filepath.Join(tmp, "a", "b", "c", "root"), filepath.Join(tmp, "escaped")
		os.MkdirAll(root, 0o755)
		os.Mkdir(target, 0o755)
		os.Symlink(target, filepath.Join(root, "vol"))
		for v := range volumes(target) {
			os.MkdirAll(filepath.Join(root, v), 0o755)
		}
		if ents, _ := os.ReadDir(target); len(ents) == 0 {
			t.Fatalf("the naive volume setup did not escape into %s", target)
		}
	})
}
