package image

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// A pulled image pushed to another registry arrives byte for byte: the
// same manifest digest, and every layer readable and verified by a pull
// back into a fresh store. Negative controls: an image this store lacks,
// and a malformed reference, are refused before anything is sent.
func TestPushIsByteForByte(t *testing.T) {
	needRoot(t) // Pull unpacks layers with their owners
	ctx := context.Background()
	src := randomImage(t)
	from := push(t, startRegistry(t, nil), "test/src:v1", src)
	s := openStore(t)
	img, err := s.Pull(ctx, from, "app", nil)
	must(t, err)

	dst := startRegistry(t, nil)
	ref := dst + "/team/app:v2"
	var msgs []string
	d, err := s.Push(ctx, "app", ref, func(p api.Progress) { msgs = append(msgs, p.Message) })
	must(t, err)
	if d != img.Digest {
		t.Fatalf("pushed digest %s, want the stored %s", d, img.Digest)
	}
	r, err := name.ParseReference(ref)
	must(t, err)
	got, err := remote.Image(r)
	must(t, err)
	if gd := digestStr(t, got); gd != img.Digest {
		t.Fatalf("the registry has %s, want %s", gd, img.Digest)
	}
	back, err := openStore(t).Pull(ctx, ref, "", nil) // verifies every blob and diff id
	must(t, err)
	if back.Digest != img.Digest || len(back.Layers) != len(img.Layers) {
		t.Fatalf("pulled back %+v, want %+v", back, img)
	}
	if len(msgs) == 0 {
		t.Fatal("no progress")
	}
	if _, err := s.Push(ctx, "missing", ref, nil); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("push of a missing image: %v, want not found", err)
	}
	if _, err := s.Push(ctx, "app", "UPPER/Case::bad", nil); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("push to a malformed reference: %v, want invalid argument", err)
	}
}
