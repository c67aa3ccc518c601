//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// hostileImage returns a docker-save tarball whose one layer holds entry.
func hostileImage(t *testing.T, hdr *tar.Header, body string) []byte {
	t.Helper()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(hdr); err != nil {
		t.Fatal(err)
	}
	if body != "" {
		io.WriteString(tw, body)
	}
	tw.Close()
	data := layer.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.NewTag("hostile:latest")
	var out bytes.Buffer
	if err := tarball.Write(ref, img, &out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// Hostile image layers are rejected through the public API, and the host
// canary beside the store is untouched (adversarial checklist #1–3).
func TestHostileImageLayersRejected(t *testing.T) {
	ctx := context.Background()
	canary := filepath.Join(filepath.Dir(dataDir), "berth-it-canary")
	if err := os.WriteFile(canary, []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(canary)
	rel := "../../../../../../../../" + strings.TrimPrefix(canary, "/")
	cases := map[string]*tar.Header{
		"dotdot":   {Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: 5},
		"hardlink": {Name: "shadow", Typeflag: tar.TypeLink, Linkname: rel},
		"device":   {Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o600},
	}
	for nm, hdr := range cases {
		t.Run(nm, func(t *testing.T) {
			body := ""
			if hdr.Size > 0 {
				body = "owned"
			}
			_, err := d.c.ImportImage(ctx, "hostile-"+nm, bytes.NewReader(hostileImage(t, hdr, body)), nil)
			if err == nil {
				defer d.c.RemoveImage(ctx, "hostile-"+nm)
				if nm != "device" {
					t.Fatalf("hostile layer %s accepted", nm)
				}
				// Device nodes are contained rather than refused: the
				// layer unpacks without them, so a sandbox from it has
				// no /mem.
				sandbox(t, api.CreateSandboxRequest{Name: "it-hostile-dev", Image: "hostile-" + nm})
				if fi, err := d.c.Stat(ctx, "it-hostile-dev", "/mem"); !errors.Is(err, errdefs.ErrNotFound) {
					t.Fatalf("device node from the layer exists in the sandbox: %+v %v", fi, err)
				}
			}
			if b, _ := os.ReadFile(canary); string(b) != "canary" {
				t.Fatalf("host canary changed to %q", b)
			}
		})
	}
}

// Files-API paths stay inside the sandbox, whatever they say (adversarial
// checklist #7). The negative control shows the probe catches a host-side
// resolver: joining the same path onto the rootfs on the host reaches the
// host canary.
func TestFilesAPIStaysInside(t *testing.T) {
	ctx := context.Background()
	sb := sandbox(t, api.CreateSandboxRequest{Name: "it-confine"})
	var rb [8]byte
	rand.Read(rb[:])
	secret := "host-secret-" + hex.EncodeToString(rb[:])
	canary := "/etc/berth-it-canary-" + hex.EncodeToString(rb[:4])
	if err := os.WriteFile(canary, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(canary)
	run(t, "it-confine", "ln -s / /home/user/root-link")

	paths := []string{
		"../../../../../.." + canary,
		"/home/user/root-link" + canary,
		"root-link/../../../.." + canary,
		"/proc/1/root" + canary,
		"/proc/self/root" + canary,
	}
	for _, p := range paths {
		rc, err := d.c.ReadFile(ctx, "it-confine", p)
		if err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			if strings.Contains(string(b), secret) {
				t.Fatalf("read of %q returned the host canary", p)
			}
		}
		if err := d.c.WriteFile(ctx, "it-confine", p, strings.NewReader("overwritten"), 0o644); err != nil {
			t.Logf("write %q: %v", p, err)
		}
		if b, _ := os.ReadFile(canary); string(b) != secret {
			t.Fatalf("host canary changed after writing %q", p)
		}
	}
	// Reading ../../etc/shadow gives the sandbox's shadow, not the host's.
	host, _ := os.ReadFile("/etc/shadow")
	rc, err := d.c.ReadFile(ctx, "it-confine", "../../etc/shadow")
	inside := readAllString(t, rc, err)
	if inside == string(host) || !strings.Contains(inside, "user:") {
		t.Fatalf("../../etc/shadow did not resolve inside the sandbox")
	}
	// Malformed paths are 400s.
	for _, p := range []string{"bad\x00path", strings.Repeat("a", 5000), "\xff\xfe"} {
		if _, err := d.c.Stat(ctx, "it-confine", p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("path %q: want invalid argument, got %v", p, err)
		}
	}
	// Negative control: resolving the symlinked path on the host, the
	// way a naive implementation would, does reach the canary.
	naive := filepath.Join(itRunDir, "rootfs", sb.ID, "rootfs", "home/user/root-link", canary)
	if b, err := os.ReadFile(naive); err != nil || string(b) != secret {
		t.Fatalf("negative control failed: a host-side join should reach the canary (%v)", err)
	}
}
