//go:build integration

package integration

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/errdefs"
)

// buildContext writes the multi-stage test context: a static Go binary
// built here with the host's go (the base image has no Go and no C
// compiler), a wheel made by hand (a wheel is a zip), and the Dockerfile.
func buildContext(t *testing.T, lastStep string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "hello")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from go\") }\n"), 0o644)
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "hello"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var wb bytes.Buffer
	zw := zip.NewWriter(&wb)
	for name, body := range map[string]string{
		"greet/__init__.py":            "def hello():\n    return 'hello from the wheel'\n",
		"greet-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: greet\nVersion: 1.0\n",
		"greet-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: berth-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"greet-1.0.dist-info/RECORD":   "greet/__init__.py,,\ngreet-1.0.dist-info/METADATA,,\ngreet-1.0.dist-info/WHEEL,,\ngreet-1.0.dist-info/RECORD,,\n",
	} {
		w, _ := zw.Create(name)
		w.Write([]byte(body))
	}
	zw.Close()
	os.WriteFile(filepath.Join(dir, "greet-1.0-py3-none-any.whl"), wb.Bytes(), 0o644)
	writeDockerfile(t, dir, lastStep)
	return dir
}

// writeDockerfile writes the test Dockerfile; lastStep is what its last
// RUN writes.
func writeDockerfile(t *testing.T, dir, lastStep string) {
	df := `FROM debian-trixie AS build
COPY hello /src/hello
RUN /src/hello > /src/hello.out && test -s /src/hello.out

FROM debian-trixie
ARG GREETING=hi
ENV APP_MODE=production GREETING=${GREETING}
LABEL org.example.test=imagebuild
EXPOSE 8080
COPY greet-1.0-py3-none-any.whl /tmp/
RUN pip install --no-index --break-system-packages /tmp/greet-1.0-py3-none-any.whl && rm /tmp/greet-1.0-py3-none-any.whl
RUN useradd --uid 1500 --create-home app
COPY --from=build /src/hello /usr/local/bin/hello
USER app
WORKDIR /srv/app
RUN echo ` + lastStep + ` > /srv/app/last.txt
CMD ["hello"]
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
}

func buildDir(t *testing.T, c *client.Client, dir string, req api.BuildRequest) (api.Image, []string, time.Duration, error) {
	t.Helper()
	var buf bytes.Buffer
	if err := client.TarContext(dir, &buf); err != nil {
		t.Fatal(err)
	}
	var log []string
	start := time.Now()
	img, err := c.BuildImage(context.Background(), req, &buf, func(p api.Progress) {
		if p.Message != "" {
			log = append(log, p.Message)
		}
	})
	return img, log, time.Since(start), err
}

func TestImageBuildMultiStage(t *testing.T) {
	dir := buildContext(t, "step-v1")
	img, log, cold, err := buildDir(t, d.c, dir, api.BuildRequest{Name: "it-build:v1", NoCache: true})
	if err != nil {
		t.Fatalf("build: %v\nlog:\n%s", err, strings.Join(log, "\n"))
	}
	t.Logf("cold build %s: %s", cold.Round(time.Millisecond), img.Digest)
	t.Cleanup(func() { _ = d.c.RemoveImage(context.Background(), "it-build:v1") })

	sandbox(t, api.CreateSandboxRequest{Name: "it-build-run", Image: "it-build:v1"})
	res, err := d.c.Exec(context.Background(), "it-build-run", api.ExecRequest{
		Command: `id -un; id -u; pwd; echo "$APP_MODE $GREETING"; python3 -c 'import greet; print(greet.hello())'; hello; cat last.txt; stat -c %U /srv/app`, TimeoutMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	want := "app\n1500\n/srv/app\nproduction hi\nhello from the wheel\nhello from go\nstep-v1\napp\n"
	if res.Stdout != want || res.ExitCode != 0 {
		t.Fatalf("sandbox from the built image:\n got %q (exit %d, stderr %q)\nwant %q", res.Stdout, res.ExitCode, res.Stderr, want)
	}

	// Fully cached rebuild: every layer step CACHED, same digest.
	img2, log2, warm, err := buildDir(t, d.c, dir, api.BuildRequest{Name: "it-build:v1"})
	if err != nil {
		t.Fatalf("cached build: %v\n%s", err, strings.Join(log2, "\n"))
	}
	if n := countCached(log2); n < 4 {
		t.Fatalf("cached rebuild: %d CACHED steps, want >= 4:\n%s", n, strings.Join(log2, "\n"))
	}
	t.Logf("fully cached build %s (cold %s), %d CACHED", warm.Round(time.Millisecond), cold.Round(time.Millisecond), countCached(log2))

	// Only the last RUN changed: the RUN steps before it are CACHED,
	// the last one reruns.
	// Same context files (their mtimes are inputs too), only the last
	// RUN changed.
	writeDockerfile(t, dir, "step-v2")
	img3, log3, last, err := buildDir(t, d.c, dir, api.BuildRequest{Name: "it-build:v2"})
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, strings.Join(log3, "\n"))
	}
	t.Cleanup(func() { _ = d.c.RemoveImage(context.Background(), "it-build:v2") })
	runs, ran := 0, 0
	for i, l := range log3 {
		if strings.Contains(l, ": RUN ") {
			runs++
			if i+1 < len(log3) && !strings.Contains(strings.Join(log3[i+1:min(i+3, len(log3))], "\n"), "CACHED") {
				ran++
				if !strings.Contains(l, "step-v2") {
					t.Errorf("step %q reran; only the last should", l)
				}
			}
		}
	}
	if runs != 4 || ran != 1 {
		t.Fatalf("rebuild: %d RUN steps, %d rerun; want 4 and 1:\n%s", runs, ran, strings.Join(log3, "\n"))
	}
	if img3.Digest == img.Digest || img2.Digest == "" {
		t.Fatalf("digests: v1 %s, cached %s, v2 %s", img.Digest, img2.Digest, img3.Digest)
	}
	t.Logf("rebuild with the last step changed: %s (cold %s, fully cached %s)", last.Round(time.Millisecond), cold.Round(time.Millisecond), warm.Round(time.Millisecond))
	t.Logf("rebuild log:\n%s", strings.Join(log3, "\n"))
}

func countCached(log []string) int {
	n := 0
	for _, l := range log {
		if strings.Contains(l, "CACHED") {
			n++
		}
	}
	return n
}

// Hostile COPY sources are refused through the real API, naming the line;
// the negative control is an in-context COPY of the same shape building.
func TestImageBuildHostileCopy(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("in context\n"), 0o644)
	os.Symlink("/etc/shadow", filepath.Join(dir, "link"))
	for _, tc := range []struct{ copy, want string }{
		{"COPY ../../etc/shadow /x", "line 2: COPY: source \"../../etc/shadow\" is outside the build context"},
		{"COPY link /x", "line 2: COPY: source \"/link\" not found"}, // resolved in the context, which has no /etc/shadow
		{"RUN --mount=type=secret,id=s cat /run/secrets/s", "line 2: RUN: --mount"},
		{"HEALTHCHECK CMD true", "line 2: HEALTHCHECK"},
	} {
		os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM debian-trixie\n"+tc.copy+"\n"), 0o644)
		_, log, _, err := buildDir(t, d.c, dir, api.BuildRequest{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want an error containing %q\n%s", tc.copy, err, tc.want, strings.Join(log, "\n"))
		}
	}
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM debian-trixie\nCOPY ok.txt /x\n"), 0o644)
	img, log, _, err := buildDir(t, d.c, dir, api.BuildRequest{Name: "it-build-ok"})
	if err != nil {
		t.Fatalf("negative control: %v\n%s", err, strings.Join(log, "\n"))
	}
	t.Cleanup(func() { _ = d.c.RemoveImage(context.Background(), "it-build-ok") })
	sandbox(t, api.CreateSandboxRequest{Name: "it-build-ok", Image: img.Digest})
	if out := run(t, "it-build-ok", "cat /x; stat -c %a /"); out.Stdout != "in context\n755\n" {
		t.Fatalf("negative control: got %q", out.Stdout)
	}
}

// itTarEnt is one entry of a hostile archive.
type itTarEnt struct {
	name, body, link string
	typ              byte
}

func itTar(t *testing.T, gz bool, ents ...itTarEnt) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, ModTime: time.Unix(1700000000, 0)}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.body))
		case tar.TypeDir:
			h.Mode = 0o755
		case tar.TypeChar:
			h.Devmajor, h.Devminor = 1, 3 // /dev/null's numbers
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// hostState is what an escape would change in the host files a hostile
// archive aims at: existence, link count (a hard link to /etc/shadow
// raises it) and whether a file holds a probe's bytes. Not the whole
// content: the host may rewrite /etc/passwd (useradd) meanwhile.
func hostState(t *testing.T, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			out[p] = "absent"
			continue
		}
		b, _ := os.ReadFile(p)
		out[p] = fmt.Sprintf("%v nlink=%d probe=%v", fi.Mode().Type(), fi.Sys().(*syscall.Stat_t).Nlink,
			bytes.Contains(b, []byte("pwned")) || bytes.Contains(b, []byte("evil")) || bytes.Equal(b, []byte("own")))
	}
	return out
}

// ADD of a hostile local tar through the real API, as the daemon (root)
// runs it: `../` names, an absolute /etc/evil, `link -> /etc` then
// `link/passwd`, a hard link to /etc/shadow and a device node. Each is
// either refused naming the line and the entry, or lands inside the
// image; the host's /etc and the daemon's data dir are untouched. The
// negative control: a benign tar's file lands where expected (and the
// contained entries are where the image should have them).
func TestImageBuildHostileAdd(t *testing.T) {
	const (
		reg  = tar.TypeReg
		sym  = tar.TypeSymlink
		hard = tar.TypeLink
	)
	dir := t.TempDir()
	files := map[string][]byte{
		"hostile.tar": itTar(t, false,
			itTarEnt{name: "/etc/evil", body: "evil", typ: reg},
			itTarEnt{name: "link", link: "/etc", typ: sym},
			itTarEnt{name: "link/passwd", body: "pwned", typ: reg},
			itTarEnt{name: "shadow", link: "/etc/shadow", typ: hard},
			itTarEnt{name: "null", typ: tar.TypeChar},
			itTarEnt{name: "../../escape", body: "pwned", typ: reg}),
		"escape.tar": itTar(t, false, itTarEnt{name: "../../escape", body: "pwned", typ: reg}),
		"deep.tar":   itTar(t, false, itTarEnt{name: strings.Repeat("../", 16) + "escape", body: "pwned", typ: reg}),
		"shadow.tar": itTar(t, false, itTarEnt{name: "shadow", link: "/etc/shadow", typ: hard}),
		"dangle.tar": itTar(t, false, itTarEnt{name: "link", link: "/etc", typ: sym}, itTarEnt{name: "link/passwd", body: "pwned", typ: reg}),
		"device.tar": itTar(t, false, itTarEnt{name: "null", typ: tar.TypeChar}),
		"contained.tar.gz": itTar(t, true,
			itTarEnt{name: "/etc/evil", body: "evil", typ: reg},
			itTarEnt{name: "link", link: "/etc", typ: sym},
			itTarEnt{name: "link/passwd", body: "pwned", typ: reg},
			itTarEnt{name: "etc/shadow", body: "own", typ: reg},
			itTarEnt{name: "shadow", link: "/etc/shadow", typ: hard}),
		"benign.tar": itTar(t, false, itTarEnt{name: "dir/", typ: tar.TypeDir}, itTarEnt{name: "dir/file.txt", body: "hello\n", typ: reg}),
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	watch := []string{"/etc/evil", "/etc/passwd", "/etc/shadow", "/escape", "/passwd", "/shadow",
		filepath.Join(filepath.Dir(dataDir), "escape"), filepath.Join(dataDir, "escape"),
		filepath.Join(dataDir, "builds", "escape"), filepath.Join(dataDir, "builds", "tmp", "escape")}
	host := hostState(t, watch)
	for _, p := range []string{"/etc/evil", "/escape"} {
		if host[p] != "absent" {
			t.Fatalf("the host already has %s: an escape could not be told", p)
		}
	}
	for _, tc := range []struct{ tar, want string }{
		{"hostile.tar", `line 2: ADD: hostile.tar: hostile or broken archive: unpack "shadow": hardlink target`},
		{"escape.tar", `line 2: ADD: escape.tar: hostile or broken archive: unpack "../../escape": name escapes the layer root`},
		{"deep.tar", `name escapes the layer root`},
		{"shadow.tar", `line 2: ADD: shadow.tar: hostile or broken archive: unpack "shadow": hardlink target`},
		{"dangle.tar", `line 2: ADD: dangle.tar: hostile or broken archive: unpack "link/passwd"`},
		{"device.tar", `line 2: ADD: device.tar: hostile or broken archive: unpack "null": device nodes are not allowed`},
	} {
		os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM debian-trixie\nADD "+tc.tar+" /dst/\n"), 0o644)
		_, log, _, err := buildDir(t, d.c, dir, api.BuildRequest{NoCache: true})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ADD %s: got %v, want an error containing %q\n%s", tc.tar, err, tc.want, strings.Join(log, "\n"))
		}
		if got := hostState(t, watch); !reflect.DeepEqual(got, host) {
			t.Fatalf("ADD %s changed the host:\n got %v\nwant %v", tc.tar, got, host)
		}
	}

	df := "FROM debian-trixie\nADD contained.tar.gz /dst/\nADD benign.tar /srv/\n"
	os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644)
	img, log, _, err := buildDir(t, d.c, dir, api.BuildRequest{Name: "it-build-add", NoCache: true})
	if err != nil {
		t.Fatalf("contained and benign archives: %v\n%s", err, strings.Join(log, "\n"))
	}
	t.Cleanup(func() { _ = d.c.RemoveImage(context.Background(), "it-build-add") })
	if got := hostState(t, watch); !reflect.DeepEqual(got, host) {
		t.Fatalf("ADD contained.tar.gz changed the host:\n got %v\nwant %v", got, host)
	}
	sandbox(t, api.CreateSandboxRequest{Name: "it-build-add", Image: img.Digest})
	out := run(t, "it-build-add", `cat /srv/dir/file.txt; cat /dst/etc/evil; echo; readlink /dst/link; cat /dst/etc/passwd; echo; `+
		`cat /dst/shadow; echo; test "$(stat -c %i /dst/shadow)" = "$(stat -c %i /dst/etc/shadow)" && echo same-inode; `+
		`test -e /etc/evil || echo no-etc-evil; grep -c '^root:' /etc/passwd; find /dst /srv -type c -o -type b | wc -l`)
	want := "hello\nevil\n/etc\npwned\nown\nsame-inode\nno-etc-evil\n1\n0\n"
	if out.Stdout != want {
		t.Fatalf("the image's view of the archives:\n got %q (stderr %q)\nwant %q", out.Stdout, out.Stderr, want)
	}
}
