package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob/fs"
	"github.com/berth-sh/berth/durable"
	"github.com/berth-sh/berth/image"
	"github.com/berth-sh/berth/internal/errdefs"
	"github.com/berth-sh/berth/policy"
	"github.com/berth-sh/berth/store/sqlite"
)

// storeImages is the daemon's image adapter in small: a real image store
// that fetches what it lacks from the shared blob store.
type storeImages struct{ s *image.Store }

func (i storeImages) Prepare(ctx context.Context, ref string) (Image, error) {
	img, err := i.s.Ensure(ctx, ref, nil)
	if err != nil {
		return Image{}, err
	}
	dirs, err := i.s.LayerDirs(ctx, img)
	if err != nil {
		return Image{}, err
	}
	return Image{Digest: img.Digest, Env: img.Config.Env, LayerDirs: dirs}, nil
}

// publishRandom imports a random image on pub under nm (publishing it).
func publishRandom(t *testing.T, pub *image.Store, nm string) string {
	t.Helper()
	src, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tag, _ := name.NewTag("example.com/x:" + nm)
	if err := tarball.Write(tag, src, &buf); err != nil {
		t.Fatal(err)
	}
	img, err := pub.Import(context.Background(), &buf, nm, nil)
	if err != nil {
		t.Fatal(err)
	}
	return img.Digest
}

// shareRig is a rig whose images come from a fresh image store sharing
// blobs with the publisher's, under pol.
func shareRig(t *testing.T, blobs *fs.Store, pol *policy.Policy) (*rig, *image.Store) {
	t.Helper()
	r := newRig(t)
	s, err := image.Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	s.SetShared(blobs, "test blobs")
	r.cfg.Images = storeImages{s}
	if pol != nil { // a nil *policy.Policy in the interface would not be nil
		r.cfg.Policy = pol
	}
	r.m = New(r.cfg)
	r.h = durable.NewHost(durable.Config{Store: r.cfg.Store.(*sqlite.Store), Compute: r.m.Compute(nil), Logf: t.Logf})
	attachControllers(t, r.m, r.h, r.now)
	return r, s
}

// TestFetchedImagesAdmittedAsPulled: a start by name fetches the image
// from the shared store, the operator's digest allowlist judges the digest
// it fetched, and the node then reports the image as held. The name ->
// digest record in the shared store is trusted, so a tampered record is
// stopped only by the pin: the same start without a policy is admitted
// (the negative control).
func TestFetchedImagesAdmittedAsPulled(t *testing.T) {
	if testing.Short() {
		t.Skip("unpacks images")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: unpacking a layer keeps its files' owners (chown)")
	}
	blobs, err := fs.New(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	defer blobs.Close()
	pub, err := image.Open(filepath.Join(t.TempDir(), "pub"))
	if err != nil {
		t.Fatal(err)
	}
	pub.SetShared(blobs, "test blobs")
	allowed := publishRandom(t, pub, "tiny")
	other := publishRandom(t, pub, "other")
	pol := &policy.Policy{Images: map[string]string{"tiny": allowed}}

	r, s := shareRig(t, blobs, pol)
	if _, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "a", Image: "tiny"}, false); err != nil {
		t.Fatalf("allowlisted image, fetched: %v", err)
	}
	if img, err := s.Resolve(ctx, "tiny"); err != nil || img.Digest != allowed {
		t.Fatalf("not fetched into the node's store: %v", err)
	}
	in, err := r.m.Compute(nil).Info(ctx)
	if err != nil || !slices.Contains(in.Images, allowed) {
		t.Fatalf("node info after a fetch: %+v %v", in.Images, err)
	}
	_, _, err = plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "b", Image: "other"}, false)
	if !errdefs.IsKind(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("image off the allowlist, fetched: %v", err)
	}
	if _, err := plane(r.m).Get(ctx, "b"); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused start left a record: %v", err)
	}

	// Someone with write access to the bucket points "tiny" at the other
	// image. A node that has not fetched "tiny" yet follows the record;
	// the pin refuses the digest.
	if err := pub.Tag(ctx, "tiny", other); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, "tiny", nil); err != nil {
		t.Fatal(err)
	}
	r2, _ := shareRig(t, blobs, pol)
	_, _, err = plane(r2.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "c", Image: "tiny"}, false)
	if !errdefs.IsKind(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("redirected name under a digest pin: %v", err)
	}
	r3, s3 := shareRig(t, blobs, nil)
	if _, _, err := plane(r3.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "c", Image: "tiny"}, false); err != nil {
		t.Fatalf("negative control (no policy): %v", err)
	}
	if img, _ := s3.Resolve(ctx, "tiny"); img == nil || img.Digest != other {
		t.Fatalf("negative control fetched %+v, want %s", img, other)
	}
}

// slowImages takes d to prepare, as a fetch of a large image does.
type slowImages struct {
	Images
	d time.Duration
}

func (s slowImages) Prepare(ctx context.Context, ref string) (Image, error) {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return Image{}, ctx.Err()
	}
	return s.Images.Prepare(ctx, ref)
}

// TestImageHasItsOwnClock: an image that takes longer to get ready than a
// whole start may take (a fetch from the shared store) does not fail the
// start; ImageTimeout bounds it instead (the control: a short one fails).
func TestImageHasItsOwnClock(t *testing.T) {
	for _, tc := range []struct {
		imageTimeout time.Duration
		ok           bool
	}{{0, true}, {300 * time.Millisecond, false}} {
		r := newRig(t)
		r.cfg.Images = slowImages{Images: r.img, d: 1500 * time.Millisecond}
		r.cfg.StartTimeout, r.cfg.ImageTimeout = time.Second, tc.imageTimeout
		r.m = New(r.cfg)
		r.h = durable.NewHost(durable.Config{Store: r.cfg.Store.(*sqlite.Store), Compute: r.m.Compute(nil), Logf: t.Logf})
		attachControllers(t, r.m, r.h, r.now)
		_, _, err := plane(r.m).GetOrCreate(ctx, api.CreateSandboxRequest{Name: "slow"}, false)
		if tc.ok && err != nil {
			t.Fatalf("image slower than StartTimeout: %v", err)
		}
		if !tc.ok && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("image slower than ImageTimeout %s: %v, want deadline exceeded", tc.imageTimeout, err)
		}
	}
}
