//go:build integration

package integration

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
