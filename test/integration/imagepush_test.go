//go:build integration

package integration

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// A built image pushed to a registry (one this test runs on loopback)
// arrives with the digest it has in berth, and a pull of it into berth
// under another name gives the same image; pushing an image berth lacks
// is not found, with nothing sent.
func TestImagePushToRegistry(t *testing.T) {
	reg := httptest.NewServer(registry.New())
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM debian-trixie\nRUN echo pushed > /pushed.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, log, _, err := buildDir(t, d.c, dir, api.BuildRequest{Name: "it-push:v1"})
	if err != nil {
		t.Fatalf("build: %v\n%s", err, strings.Join(log, "\n"))
	}
	t.Cleanup(func() { _ = d.c.RemoveImage(context.Background(), "it-push:v1") })
	ctx := context.Background()
	ref := host + "/team/it-push:v1"
	var msgs []string
	out, err := d.c.PushImage(ctx, api.PushRequest{Image: "it-push:v1", Ref: ref}, func(p api.Progress) { msgs = append(msgs, p.Message) })
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if out.Digest != img.Digest || out.Ref != ref {
		t.Fatalf("push answered %+v, want digest %s ref %s", out, img.Digest, ref)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	if gd, _ := got.Digest(); gd.String() != img.Digest {
		t.Fatalf("the registry has %s, want %s", gd, img.Digest)
	}
	back, err := d.c.PullImage(ctx, api.PullRequest{Ref: ref, Name: "it-push-back"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.c.RemoveImage(context.Background(), "it-push-back") })
	if back.Digest != img.Digest {
		t.Fatalf("pulled back %s, want %s", back.Digest, img.Digest)
	}
	t.Logf("pushed %s (%d layers, %d progress events)", img.Digest, img.Layers, len(msgs))
	if _, err := d.c.PushImage(ctx, api.PushRequest{Image: "it-push:missing", Ref: host + "/team/missing:v1"}, nil); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("push of a missing image: %v, want not found", err)
	}
}
