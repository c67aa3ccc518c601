package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/internal/errdefs"
)

// The images a cluster's nodes share live in the shared blob store under:
//
//	images/blobs/sha256/<hex>   manifests, configs and compressed layers,
//	                            byte for byte as in <root>/blobs/sha256
//	images/names/<name>         {"digest":"sha256:<hex>"}: a name's manifest
//	images/names/<repo>/<tag>   the same for a tagged name ("repo:tag")
//
// Publish writes layers, then the config, then the manifest, then the name,
// each a complete blob before the next starts. Every blob is immutable
// (its key is its digest), so a reader that finds a name finds a manifest
// whose blobs are all there, and a reader that finds a manifest finds its
// config and layers. Nothing is ever deleted from there by berth: another
// node may still be fetching an image that this one removed.
const (
	sharedBlobs = "images/blobs/sha256/"
	sharedNames = "images/names/"

	maxNameRecord = 64 << 10
)

// SetShared makes s publish every image it builds, pulls or imports to b,
// and lets Ensure and Fetch get images this host lacks from b. desc names
// b in messages ("s3 host:port/bucket"). Call it before s is shared.
func (s *Store) SetShared(b blob.Store, desc string) {
	s.shared, s.sharedDesc = b, desc
}

// Shared reports whether s publishes to and fetches from a shared blob
// store.
func (s *Store) Shared() bool { return s.shared != nil }

// nameRecord is the content of an images/names/ blob.
type nameRecord struct {
	Digest string `json:"digest"`
}

func sharedBlobKey(digest string) string {
	return sharedBlobs + strings.TrimPrefix(digest, "sha256:")
}

// sharedNameKey maps a local image name to its key. Blob keys have no
// ':', so a tag becomes a path segment; names and tags start with a
// letter, digit or '_', so no segment is "." or "..".
func sharedNameKey(nm string) string {
	return sharedNames + strings.Replace(nm, ":", "/", 1)
}

// published ends a build, pull or import: with a shared store it
// publishes img under nm (which may be empty). The image is already
// stored here, so a failure says so: repeating the operation publishes
// what is missing.
func (s *Store) published(ctx context.Context, img *Image, nm string, rep *reporter) (*Image, error) {
	if s.shared == nil {
		return img, nil
	}
	if err := s.publish(ctx, img.Digest, nm, rep); err != nil {
		return nil, errdefs.New(kindOr(err, errdefs.ErrUnavailable),
			"image %s is stored on this node, but publishing it to %s failed (repeat the operation to retry): %w", img.Digest, s.sharedDesc, err)
	}
	return img, nil
}

// Publish uploads the image ref resolves to (and, if ref is one of its
// names, that name) to the shared blob store; blobs already there are
// skipped.
func (s *Store) Publish(ctx context.Context, ref string, progress func(api.Progress)) error {
	if s.shared == nil {
		return errdefs.FailedPrecondition("no shared blob store is configured for images")
	}
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	img, err := s.Resolve(ctx, ref)
	if err != nil {
		return err
	}
	nm := ""
	if img.Name == ref {
		nm = ref
	}
	return s.publish(ctx, img.Digest, nm, &reporter{fn: progress})
}

// publish uploads one recorded image in the order the layout above needs.
// The caller holds gcMu shared, so the local blobs stay while they are read.
func (s *Store) publish(ctx context.Context, digest, nm string, rep *reporter) error {
	s.mu.Lock()
	rec := s.idx.Images[digest]
	var cp record
	if rec != nil {
		cp = *rec
		cp.Layers = append([]string(nil), rec.Layers...)
	}
	s.mu.Unlock()
	if rec == nil {
		return notFound(digest)
	}
	blobs := append(append(cp.Layers, cp.ConfigD), cp.Manifest)
	for i, d := range blobs {
		msg := fmt.Sprintf("publishing blob %d/%d %s", i+1, len(blobs), d)
		if err := s.publishBlob(ctx, d, msg, rep); err != nil {
			return err
		}
	}
	if nm == "" {
		rep.msg("published %s to %s", digest, s.sharedDesc)
		return nil
	}
	b, err := json.Marshal(nameRecord{Digest: digest})
	if err != nil {
		return err
	}
	if _, err := s.shared.Put(ctx, sharedNameKey(nm), bytes.NewReader(b), ""); err != nil {
		return fmt.Errorf("name %s: %w", nm, err)
	}
	rep.msg("published %s as %s to %s", digest, nm, s.sharedDesc)
	return nil
}

// publishBlob uploads one local blob unless the shared store already
// holds it intact (same size and content digest).
func (s *Store) publishBlob(ctx context.Context, digest, msg string, rep *reporter) error {
	key, hex := sharedBlobKey(digest), strings.TrimPrefix(digest, "sha256:")
	f, err := os.Open(s.blobPath(digest))
	if err != nil {
		return errdefs.NotFound("blob %s missing from the image store: %w", digest, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if info, err := s.shared.Stat(ctx, key); err == nil && info.Size == fi.Size() && info.SHA256 == hex {
		rep.bytes(msg, fi.Size(), fi.Size())
		return nil
	} else if err != nil && !errdefs.IsKind(err, errdefs.ErrNotFound) {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	// The store checks the content against hex while it streams: a local
	// blob that rotted on disk is refused, not published.
	cr := &countReader{r: f, fn: func(n int64) { rep.bytes(msg, n, fi.Size()) }}
	if _, err := s.shared.Put(ctx, key, cr, hex); err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	return nil
}

// Ensure resolves ref as Resolve does and, when the image is not here but
// the shared blob store has it (by name or full digest), fetches it first.
func (s *Store) Ensure(ctx context.Context, ref string, progress func(api.Progress)) (*Image, error) {
	img, err := s.Resolve(ctx, ref)
	if err == nil || s.shared == nil || !errdefs.IsKind(err, errdefs.ErrNotFound) {
		return img, err
	}
	return s.Fetch(ctx, ref, progress)
}

// Fetch gets the image ref names (a local image name or a full manifest
// digest) from the shared blob store into this store, as an import would:
// every blob is verified against its digest while it streams, and the
// image becomes visible only once all its layers are unpacked. An image
// already here is not fetched again. Concurrent fetches of one ref share
// one download; progress goes to the caller that started it.
func (s *Store) Fetch(ctx context.Context, ref string, progress func(api.Progress)) (*Image, error) {
	if s.shared == nil {
		return nil, errdefs.FailedPrecondition("no shared blob store is configured for images")
	}
	if img, err := s.Resolve(ctx, ref); err == nil {
		return img, nil
	}
	err := s.flights.do(ctx, ref, func(ctx context.Context) error {
		if _, err := s.Resolve(ctx, ref); err == nil {
			return nil // a fetch that ended just before this one began
		}
		return s.fetch(ctx, ref, &reporter{fn: progress})
	})
	if err != nil {
		return nil, err
	}
	return s.Resolve(ctx, ref)
}

// fetch downloads and commits one image. On failure it removes the blobs
// and unpacked layers it added that no recorded image uses, so a refused
// fetch leaves the store as it was.
func (s *Store) fetch(ctx context.Context, ref string, rep *reporter) error {
	var added record
	err := func() error {
		s.gcMu.RLock()
		defer s.gcMu.RUnlock()
		return s.fetchLocked(ctx, ref, rep, &added)
	}()
	if err != nil {
		s.collect(&added)
	}
	if errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		// Content that fails its checks is the shared store's fault, not
		// the request's: the start cannot succeed until it is republished.
		err = errdefs.New(errdefs.ErrFailedPrecondition, "%w", err)
	}
	return err
}

// fetchLocked does fetch's work with gcMu held shared, noting in added
// what it wrote.
func (s *Store) fetchLocked(ctx context.Context, ref string, rep *reporter, added *record) error {
	digest, nm, err := s.sharedDigest(ctx, ref)
	if err != nil {
		return err
	}
	rep.msg("fetching %s (%s) from %s", ref, digest, s.sharedDesc)
	rc, _, err := s.shared.Get(ctx, sharedBlobKey(digest))
	if err != nil {
		if nm == "" && errdefs.IsKind(err, errdefs.ErrNotFound) {
			return s.notShared(ref) // by digest: the manifest is the image
		}
		return s.sharedErr(ref, "manifest "+digest, err)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	rc.Close()
	switch {
	case err != nil:
		return s.sharedErr(ref, "manifest "+digest, err)
	case len(raw) > maxManifestBytes:
		return errdefs.InvalidArgument("manifest %s in %s is larger than %d bytes", digest, s.sharedDesc, maxManifestBytes)
	case digestOf(raw) != digest:
		return errdefs.InvalidArgument("manifest %s in %s does not match its digest (corrupt or tampered content)", digest, s.sharedDesc)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return errdefs.InvalidArgument("bad image manifest %s in %s: %w", digest, s.sharedDesc, err)
	}
	if len(m.Layers) > maxLayers {
		return errdefs.InvalidArgument("image %s has %d layers; at most %d are supported", digest, len(m.Layers), maxLayers)
	}
	blobs := append([]v1.Descriptor{m.Config}, m.Layers...)
	for _, b := range blobs {
		if !digestRe.MatchString(b.Digest.String()) {
			return errdefs.InvalidArgument("image %s names a blob with an unsupported digest %q", digest, b.Digest)
		}
	}
	// commit unpacks every layer; if it fails half way the layers it did
	// unpack are the fetch's to remove.
	if cfgRaw, err := s.fetchBlob(ctx, ref, m.Config, "config", rep, added); err != nil {
		return err
	} else if cf, err := v1.ParseConfigFile(bytes.NewReader(cfgRaw)); err == nil {
		for _, d := range cf.RootFS.DiffIDs {
			added.DiffIDs = append(added.DiffIDs, d.String())
		}
	}
	for i, l := range m.Layers {
		if _, err := s.fetchBlob(ctx, ref, l, fmt.Sprintf("layer %d/%d", i+1, len(m.Layers)), rep, added); err != nil {
			return err
		}
	}
	if !s.hasBlob(digest) {
		added.Manifest = digest
	}
	_, err = s.commit(ctx, raw, "", nm, rep)
	return err
}

// fetchBlob copies one blob from the shared store unless it is here. For
// the config it returns the content (read back from the verified local
// copy, at most maxConfigBytes).
func (s *Store) fetchBlob(ctx context.Context, ref string, d v1.Descriptor, what string, rep *reporter, added *record) ([]byte, error) {
	digest := d.Digest.String()
	if !s.hasBlob(digest) {
		rc, info, err := s.shared.Get(ctx, sharedBlobKey(digest))
		if err != nil {
			return nil, s.sharedErr(ref, what+" "+digest, err)
		}
		total := d.Size
		if total <= 0 {
			total = info.Size
		}
		// One byte past the manifest's size is enough to tell an object
		// that is too long; a huge planted object never fills the disk.
		var r io.Reader = rc
		if d.Size > 0 {
			r = io.LimitReader(rc, d.Size+1)
		}
		msg := fmt.Sprintf("%s %s", what, digest)
		_, _, err = s.writeBlob(ctx, r, digest, func(n int64) { rep.bytes(msg, n, total) })
		rc.Close()
		if err != nil {
			if errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
				return nil, errdefs.InvalidArgument("%s %s of image %s from %s refused: %w", what, digest, ref, s.sharedDesc, err)
			}
			return nil, s.sharedErr(ref, what+" "+digest, err)
		}
		if what == "config" {
			added.ConfigD = digest
		} else {
			added.Layers = append(added.Layers, digest)
		}
	}
	if what != "config" {
		return nil, nil
	}
	return s.readBlob(digest, maxConfigBytes)
}

// sharedDigest finds the manifest digest ref stands for in the shared
// store, and the name to record it under (empty for a digest).
func (s *Store) sharedDigest(ctx context.Context, ref string) (digest, nm string, err error) {
	if h := strings.TrimPrefix(ref, "sha256:"); len(h) == 64 && hexRe.MatchString(h) {
		return "sha256:" + h, "", nil
	}
	if ValidateName(ref) != nil {
		// A registry reference or a digest prefix: nothing to look up by.
		return "", "", s.notShared(ref)
	}
	rc, _, err := s.shared.Get(ctx, sharedNameKey(ref))
	if err != nil {
		if errdefs.IsKind(err, errdefs.ErrNotFound) {
			return "", "", s.notShared(ref)
		}
		return "", "", s.sharedErr(ref, "name", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxNameRecord+1))
	if err != nil {
		return "", "", s.sharedErr(ref, "name", err)
	}
	var nr nameRecord
	if len(b) > maxNameRecord || json.Unmarshal(b, &nr) != nil || !digestRe.MatchString(nr.Digest) {
		return "", "", errdefs.InvalidArgument("the name record of image %q in %s is malformed", ref, s.sharedDesc)
	}
	return nr.Digest, ref, nil
}

func (s *Store) notShared(ref string) error {
	return errdefs.NotFound("image %q not found on this node or in %s; pull it with `berth image pull` or build it with `berth image build-base`", ref, s.sharedDesc)
}

// sharedErr names the image, the part and the shared store around a
// failure to read from it, keeping its kind (unavailable when the store
// does not answer); a missing blob under a name or manifest that exists
// means the shared store lost it.
func (s *Store) sharedErr(ref, what string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errdefs.IsKind(err, errdefs.ErrNotFound) {
		return errdefs.FailedPrecondition("image %q: %s is missing from %s: %w", ref, what, s.sharedDesc, err)
	}
	return errdefs.New(kindOr(err, errdefs.ErrUnavailable), "fetch image %q from %s: %s: %w", ref, s.sharedDesc, what, err)
}

// kindOr is err's kind, or def when it has none.
func kindOr(err, def error) error {
	if k := errdefs.Kind(err); k != nil {
		return k
	}
	return def
}

type countReader struct {
	r  io.Reader
	n  int64
	fn func(int64)
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.fn(c.n)
	return n, err
}
