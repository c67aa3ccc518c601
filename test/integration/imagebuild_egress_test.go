//go:build integration

package integration

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/egress"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
)

// egBuild builds the Dockerfile df (an otherwise empty context) on the
// egress daemon under policy p.
func egBuild(t *testing.T, ed *egDaemon, name, df string, p api.NetworkPolicy) (api.Image, []string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	img, log, _, err := buildDir(t, ed.c, dir, api.BuildRequest{Name: name, NoCache: true, Network: &p})
	return img, log, err
}

// ociManifest is the part of an OCI manifest the scan needs.
type ociManifest struct {
	Config struct {
		Digest string `json:"digest"`
	} `json:"config"`
	Layers []struct {
		Digest    string `json:"digest"`
		MediaType string `json:"mediaType"`
	} `json:"layers"`
}

// blobFile is where the image store keeps a blob (image.Store: <root>/
// blobs/sha256/<hex>, root <data>/images).
func blobFile(data, digest string) string {
	return filepath.Join(data, "images", "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

// scanBlob reports which of pats occur in a blob's bytes, decompressed
// first when it is a compressed layer (gzip, zstd, bzip2; anything else
// is scanned as it is), and how many bytes it scanned. The stream is read
// in chunks that overlap by the longest pattern, so no match is lost at a
// chunk boundary.
func scanBlob(t *testing.T, file string, pats map[string]string) (map[string]bool, int64) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, closeFn, err := image.Decompress(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	defer closeFn()
	longest := 0
	for _, p := range pats {
		longest = max(longest, len(p))
	}
	found := map[string]bool{}
	br := bufio.NewReaderSize(r, 1<<20)
	buf := make([]byte, 0, 8<<20)
	chunk := make([]byte, 4<<20)
	var n int64
	for {
		k, err := io.ReadFull(br, chunk)
		n += int64(k)
		buf = append(buf, chunk[:k]...)
		for name, p := range pats {
			if bytes.Contains(buf, []byte(p)) {
				found[name] = true
			}
		}
		if len(buf) > longest {
			buf = append(buf[:0], buf[len(buf)-longest:]...)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return found, n
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
}

// A build's RUN reaches a host through injection, which puts the secret
// on the request host-side: the upstream sees it, the step's command
// never does, and no layer of the image (no blob in the daemon's store)
// holds it. The negative control is a canary the same RUN writes into
// its layer, which the same scan must find.
func TestImageBuildSecretInjection(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("nsenter not installed")
	}
	w := setupEgressWorld(t)
	ed := startEgressDaemon(t, w, "")
	ctx := context.Background()
	if err := ed.c.SetSecret(ctx, "gh", w.secret); err != nil {
		t.Fatal(err)
	}
	p := api.NetworkPolicy{Inject: []api.InjectRule{{Host: "api.internal.test",
		SetHeaders: map[string]string{"Authorization": "Bearer ${secret:gh}"}}}}
	canary := fmt.Sprintf("canary-%d-planted", time.Now().UnixNano())
	// The step keeps everything a leaky step could keep: the response,
	// curl's verbose trace (the request headers curl itself sent), its
	// environment. It fails unless the upstream answered auth=match.
	df := "FROM debian-trixie\n" +
		"RUN mkdir -p /out && echo " + canary + " > /out/canary.txt && " +
		"curl -sS -v -m 20 -o /out/resp.txt https://api.internal.test/build 2> /out/curl-verbose.txt; " +
		"cat /out/resp.txt; env > /out/env.txt; grep -q 'auth=match' /out/resp.txt\n"
	before := len(w.authSeen())
	img, log, err := egBuild(t, ed, "it-build-secret", df, p)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, strings.Join(log, "\n"))
	}
	t.Cleanup(func() { _ = ed.c.RemoveImage(context.Background(), "it-build-secret") })
	joined := strings.Join(log, "\n")
	if !strings.Contains(joined, "server=api host=api.internal.test auth=match") {
		t.Errorf("the RUN's output does not show the injected request:\n%s", joined)
	}
	seen := w.authSeen()[before:]
	if len(seen) == 0 {
		t.Fatalf("the upstream saw no request from the build")
	}
	for _, a := range seen {
		if a != "Bearer "+w.secret {
			t.Fatalf("the upstream received Authorization %q, want the injected secret", a)
		}
	}
	if strings.Contains(joined, w.secret) {
		t.Fatalf("the build log holds the secret")
	}

	// Every blob the daemon's image store holds (the base's, the
	// intermediate images', the result's manifest, config and layers),
	// decompressed.
	mb, err := os.ReadFile(blobFile(ed.data, img.Digest))
	if err != nil {
		t.Fatal(err)
	}
	var m ociManifest
	if err := json.Unmarshal(mb, &m); err != nil || len(m.Layers) < 2 {
		t.Fatalf("manifest of %s: %v (%d layers)", img.Digest, err, len(m.Layers))
	}
	// The daemon's egress CA: a line of its PEM body (no layer may carry
	// it; each start installs it again).
	caPEM, err := os.ReadFile(filepath.Join(ed.data, "egress", "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	caLine := strings.Split(strings.TrimSpace(string(caPEM)), "\n")[1]
	pats := map[string]string{"secret": w.secret, "canary": canary, "egress-ca": caLine}
	var total int64
	var files []string
	root := filepath.Join(ed.data, "images", "blobs", "sha256")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		files = append(files, filepath.Join(root, e.Name()))
	}
	inBlob := map[string]map[string]bool{}
	for _, f := range files {
		found, n := scanBlob(t, f, pats)
		total += n
		inBlob[f] = found
		if found["secret"] {
			t.Errorf("blob %s holds the secret", filepath.Base(f))
		}
	}
	// Every layer of the result was scanned; the canary is in its last
	// layer, the RUN's: the scan finds what a step wrote.
	for _, l := range m.Layers {
		if _, ok := inBlob[blobFile(ed.data, l.Digest)]; !ok {
			t.Fatalf("layer %s is not in the store's blobs", l.Digest)
		}
	}
	last := blobFile(ed.data, m.Layers[len(m.Layers)-1].Digest)
	if !inBlob[last]["canary"] {
		t.Fatalf("negative control: the scan did not find the canary in the RUN's layer %s (%s): it proves nothing",
			filepath.Base(last), m.Layers[len(m.Layers)-1].MediaType)
	}
	t.Logf("scanned %d blobs, %d MiB decompressed; canary in the RUN's layer, secret in none", len(files), total>>20)
	// berth's egress CA, written into the build sandbox's upper at its
	// start (the CA file, and a line in the trust bundle), is not in the
	// RUN's layer: the built image does not trust this deployment's proxy
	// wherever it runs. The negative control is below: a sandbox from the
	// image has it again, found by the same line.
	if inBlob[last]["egress-ca"] {
		t.Errorf("the RUN's layer %s holds berth's egress CA", filepath.Base(last))
	}
	var other []string
	for _, n := range layerEntries(t, last) {
		if n != "out" && !strings.HasPrefix(n, "out/") {
			other = append(other, n)
		}
		if n == strings.TrimPrefix(egress.CAFileInSandbox, "/") {
			t.Errorf("the RUN's layer holds %s", egress.CAFileInSandbox)
		}
	}
	t.Logf("the RUN's layer holds, beside /out: %v", other)

	// The image itself: the step's files are there, none holds it.
	sb := "it-build-secret-run"
	if _, _, err := ed.c.GetOrCreate(ctx, api.CreateSandboxRequest{Name: sb, Image: img.Digest}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ed.c.Destroy(context.Background(), sb) })
	out := egRun(t, ed, sb, "cat /out/canary.txt /out/resp.txt; grep -c '> GET /build' /out/curl-verbose.txt")
	if !strings.Contains(out, canary) || !strings.Contains(out, "auth=match") || !strings.Contains(out, "1\n") {
		t.Fatalf("the built image lacks the step's files: %q", out)
	}
	if n := egRun(t, ed, sb, "grep -c -F '"+caLine+"' "+egress.BundleInSandbox); strings.TrimSpace(n) != "1" {
		t.Fatalf("negative control: a sandbox from the image should trust the egress CA once (its start installs it), grep -c says %q", n)
	}
}

// A RUN reaching a host the build's policy does not allow fails the build,
// naming the Dockerfile line; the same step builds under a policy that
// allows the host (the negative control), so the refusal is the policy's.
func TestImageBuildEgressDenied(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Skip("nsenter not installed")
	}
	w := setupEgressWorld(t)
	ed := startEgressDaemon(t, w, "")
	for _, tc := range []struct {
		name, cmd, allow string
	}{
		// --resolve: the request reaches berth's proxy (not only its
		// resolver, which does not answer names outside the policy).
		{"host", "curl -sS -f -m 10 --resolve other.test:80:" + egOther + " http://other.test/", "other.test"},
		{"bare-ip-https", "curl -sS -f -k -m 10 https://" + egOther + "/", egOther},
		{"name", "curl -sS -f -m 10 http://other.test/", "other.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			df := "FROM debian-trixie\nRUN " + tc.cmd + "\n"
			// api.internal.test is allowed: the policy is not simply
			// "no internet".
			p := api.NetworkPolicy{Allow: []string{"api.internal.test"}}
			_, log, err := egBuild(t, ed, "", df, p)
			want := "Dockerfile line 2: RUN " + tc.cmd + ": exit code"
			if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Fatalf("got %v, want a failed step: %q\n%s", err, want, strings.Join(log, "\n"))
			}
			joined := strings.Join(log, "\n")
			if strings.Contains(joined, "server=other") {
				t.Fatalf("the denied host answered:\n%s", joined)
			}
			t.Logf("refused: %v; step output: %s", err, lastLines(log, 3))

			p.Allow = append(p.Allow, tc.allow)
			img, log, err := egBuild(t, ed, "", df, p)
			if err != nil {
				t.Fatalf("negative control: with %s allowed the step fails: %v\n%s", tc.allow, err, strings.Join(log, "\n"))
			}
			if joined := strings.Join(log, "\n"); !strings.Contains(joined, "server=other") {
				t.Fatalf("negative control: the allowed host did not answer:\n%s", joined)
			}
			if img.Digest == "" {
				t.Fatal("negative control: no image")
			}
		})
	}
}

// layerEntries lists the names in a layer blob.
func layerEntries(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, closeFn, err := image.Decompress(f)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	var names []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/"), "/"))
	}
}

func lastLines(log []string, n int) string {
	return strings.Join(log[max(0, len(log)-n):], " | ")
}
