package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/blob"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Store is the local image store rooted at one directory:
//
//	<root>/blobs/sha256/<hex>   manifests, configs, compressed layers
//	<root>/l/<16 hex of diffid> unpacked read-only layers (overlay lowers)
//	<root>/tmp/                 partial blobs and unpacks (never read)
//	<root>/index.json           images, names and refs → digest
//
// It is safe for concurrent use by the goroutines of one process.
type Store struct {
	root string

	// InUse, when set, reports whether a sandbox still uses the image with
	// this manifest digest; Remove refuses such images. It is called with
	// the store's lock held, so it must not call back into the Store. Set
	// it before the Store is shared.
	InUse func(digest string) bool

	mu  sync.Mutex // guards idx and index.json
	idx index

	// gcMu keeps garbage collection from deleting blobs or layer dirs an
	// ingest (pull, import, build) has written but not yet recorded:
	// ingests hold it shared, collection exclusively. Order: gcMu, then mu.
	gcMu sync.RWMutex

	layerMu sync.Mutex
	layers  map[string]*sync.Mutex // per-layer unpack locks

	// shared, when set (SetShared), is the cluster's blob store: images
	// are published there and fetched from there (share.go).
	shared     blob.Store
	sharedDesc string
	flights    flights // one fetch per ref at a time
}

// Image is one stored image.
type Image struct {
	Digest    string    `json:"digest"` // manifest digest "sha256:..."
	Name      string    `json:"name,omitempty"`
	Ref       string    `json:"ref,omitempty"`
	Config    Config    `json:"config"`
	Layers    []string  `json:"layers"`  // compressed blob digests, lowest first
	DiffIDs   []string  `json:"diffIds"` // uncompressed digests, lowest first
	Size      int64     `json:"size"`    // compressed layer bytes
	CreatedAt time.Time `json:"createdAt"`
}

// Config is the part of the OCI image config a sandbox start needs.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// Labels are the image config's labels; build-base records its
	// recipe in BaseRecipeLabel.
	Labels map[string]string `json:"labels,omitempty"`
}

// index is the persisted catalog. Images are keyed by manifest digest.
type index struct {
	Images map[string]*record `json:"images"`
	Names  map[string]string  `json:"names"` // name[:tag] → digest
	Refs   map[string]string  `json:"refs"`  // normalized pulled ref → digest
}

type record struct {
	Image
	Manifest string `json:"manifest"` // blob digest of the raw manifest
	ConfigD  string `json:"configDigest"`
}

// Open opens (creating if needed) the store at root, normally
// <data>/images.
func Open(root string) (*Store, error) {
	for _, d := range []string{"blobs/sha256", "l", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return nil, fmt.Errorf("create image store: %w", err)
		}
	}
	// Leftovers of a crash mid-write or mid-unpack are never referenced.
	if ents, err := os.ReadDir(filepath.Join(root, "tmp")); err == nil {
		for _, e := range ents {
			os.RemoveAll(filepath.Join(root, "tmp", e.Name()))
		}
	}
	s := &Store{root: root, layers: map[string]*sync.Mutex{}}
	b, err := os.ReadFile(filepath.Join(root, "index.json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read image index: %w", err)
	default:
		if err := json.Unmarshal(b, &s.idx); err != nil {
			return nil, fmt.Errorf("image index %s is corrupt: %w", filepath.Join(root, "index.json"), err)
		}
	}
	if s.idx.Images == nil {
		s.idx.Images = map[string]*record{}
	}
	if s.idx.Names == nil {
		s.idx.Names = map[string]string{}
	}
	if s.idx.Refs == nil {
		s.idx.Refs = map[string]string{}
	}
	return s, nil
}

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

// saveLocked writes index.json atomically (temp + fsync + rename). s.mu held.
func (s *Store) saveLocked() error {
	b, err := json.MarshalIndent(&s.idx, "", " ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.root, "index.json"), b)
}

func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$`)
	hexRe    = regexp.MustCompile(`^[0-9a-f]{12,64}$`)
	digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// ValidateName checks a local image name: [a-z0-9][a-z0-9._-]{0,127} with an
// optional :tag.
func ValidateName(n string) error {
	if !nameRe.MatchString(n) {
		return errdefs.InvalidArgument("invalid image name %q: use lowercase letters, digits, '.', '_' and '-' (max 128), optionally with :tag", n)
	}
	return nil
}

func notFound(ref string) error {
	return errdefs.NotFound("image %q not found; pull it with `berth image pull` or build it with `berth image build-base`", ref)
}

// normalizeRef returns the canonical form of a registry reference
// ("alpine" → "index.docker.io/library/alpine:latest"), or "" if ref is not
// one.
func normalizeRef(ref string) string {
	r, err := name.ParseReference(ref)
	if err != nil {
		return ""
	}
	return r.Name()
}

// Resolve finds an image by name, by digest ("sha256:<hex>", or a unique
// prefix of at least 12 hex digits with or without "sha256:"), or by a
// reference it was pulled as.
func (s *Store) Resolve(ctx context.Context, ref string) (*Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, name, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	img := s.idx.Images[d].Image
	img.Name = name
	img.Config = cloneConfig(img.Config)
	img.Layers = append([]string(nil), img.Layers...)
	img.DiffIDs = append([]string(nil), img.DiffIDs...)
	return &img, nil
}

func cloneConfig(c Config) Config {
	c.Env = append([]string(nil), c.Env...)
	c.Entrypoint = append([]string(nil), c.Entrypoint...)
	c.Cmd = append([]string(nil), c.Cmd...)
	return c
}

// resolveLocked returns the digest and, if ref named it, the name.
func (s *Store) resolveLocked(ref string) (digest, nm string, err error) {
	if ref == "" {
		return "", "", errdefs.InvalidArgument("empty image reference")
	}
	if d, ok := s.idx.Names[ref]; ok {
		return d, ref, nil
	}
	hex := strings.TrimPrefix(ref, "sha256:")
	if hexRe.MatchString(hex) {
		var found []string
		for d := range s.idx.Images {
			if strings.HasPrefix(strings.TrimPrefix(d, "sha256:"), hex) {
				found = append(found, d)
			}
		}
		switch len(found) {
		case 1:
			return found[0], s.firstNameLocked(found[0]), nil
		case 0:
		default:
			return "", "", errdefs.InvalidArgument("image digest prefix %q is ambiguous", ref)
		}
	}
	if d, ok := s.idx.Refs[ref]; ok {
		return d, s.firstNameLocked(d), nil
	}
	if n := normalizeRef(ref); n != "" {
		if d, ok := s.idx.Refs[n]; ok {
			return d, s.firstNameLocked(d), nil
		}
		// repo@sha256:... of an image we have under another ref.
		if i := strings.LastIndex(ref, "@"); i >= 0 && digestRe.MatchString(ref[i+1:]) {
			if _, ok := s.idx.Images[ref[i+1:]]; ok {
				return ref[i+1:], s.firstNameLocked(ref[i+1:]), nil
			}
		}
	}
	return "", "", notFound(ref)
}

func (s *Store) namesLocked(digest string) []string {
	var out []string
	for n, d := range s.idx.Names {
		if d == digest {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func (s *Store) firstNameLocked(digest string) string {
	if n := s.namesLocked(digest); len(n) > 0 {
		return n[0]
	}
	return ""
}

// Tag points name at the image ref resolves to (usually a digest).
func (s *Store) Tag(ctx context.Context, name, ref string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d, _, err := s.resolveLocked(ref)
	if err != nil {
		return err
	}
	s.idx.Names[name] = d
	return s.saveLocked()
}

// List returns one entry per name, plus one for each image with no name.
func (s *Store) List(ctx context.Context) ([]api.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []api.Image
	for d, r := range s.idx.Images {
		names := s.namesLocked(d)
		if len(names) == 0 {
			names = []string{""}
		}
		for _, n := range names {
			out = append(out, api.Image{Name: n, Ref: r.Ref, Digest: d, Size: r.Size, Layers: len(r.Layers), Labels: r.Config.Labels, CreatedAt: r.CreatedAt})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Digest < out[j].Digest
	})
	return out, nil
}

// APIImage converts img to its wire form.
func (img *Image) APIImage() api.Image {
	return api.Image{Name: img.Name, Ref: img.Ref, Digest: img.Digest, Size: img.Size, Layers: len(img.Layers),
		Labels: img.Config.Labels, CreatedAt: img.CreatedAt}
}

// Remove deletes a name (or pulled ref) — and the image too once nothing
// names it and no sandbox uses it — or, given a digest, the image with all
// its names. Blobs and unpacked layers no other image shares go with it.
func (s *Store) Remove(ctx context.Context, ref string) error {
	deleted, err := s.removeIndex(ref)
	if err != nil || deleted == nil {
		return err
	}
	s.collect(deleted)
	return nil
}

// removeIndex drops ref from the index and returns the record of the image
// it deleted, if any.
func (s *Store) removeIndex(ref string) (*record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, _, err := s.resolveLocked(ref)
	if err != nil {
		return nil, err
	}
	_, isName := s.idx.Names[ref]
	_, isRef := s.idx.Refs[ref]
	nref := normalizeRef(ref)
	if _, ok := s.idx.Refs[nref]; ok && !isName && nref != "" {
		isRef, ref = true, nref
	}
	if isName || isRef {
		if isName {
			delete(s.idx.Names, ref)
		} else {
			delete(s.idx.Refs, ref)
		}
		if len(s.namesLocked(d)) > 0 || s.hasRefLocked(d) || (s.InUse != nil && s.InUse(d)) {
			return nil, s.saveLocked()
		}
	} else if s.InUse != nil && s.InUse(d) {
		return nil, errdefs.FailedPrecondition("image %s is used by a sandbox; destroy the sandbox first", d)
	}
	rec := s.idx.Images[d]
	delete(s.idx.Images, d)
	for n, v := range s.idx.Names {
		if v == d {
			delete(s.idx.Names, n)
		}
	}
	for n, v := range s.idx.Refs {
		if v == d {
			delete(s.idx.Refs, n)
		}
	}
	return rec, s.saveLocked()
}

func (s *Store) hasRefLocked(d string) bool {
	for _, v := range s.idx.Refs {
		if v == d {
			return true
		}
	}
	return false
}

// collect deletes the blobs and unpacked layers of a removed image (or of
// a fetch that failed) that no remaining image references. Empty digests
// in rec are skipped.
func (s *Store) collect(rec *record) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	usedBlobs := map[string]bool{}
	usedLayers := map[string]bool{}
	s.mu.Lock()
	for _, r := range s.idx.Images {
		usedBlobs[r.Manifest], usedBlobs[r.ConfigD] = true, true
		for _, l := range r.Layers {
			usedBlobs[l] = true
		}
		for _, l := range r.DiffIDs {
			usedLayers[layerID(l)] = true
		}
	}
	s.mu.Unlock()
	for _, b := range append([]string{rec.Manifest, rec.ConfigD}, rec.Layers...) {
		if b != "" && !usedBlobs[b] {
			os.Remove(s.blobPath(b))
		}
	}
	for _, l := range rec.DiffIDs {
		if id := layerID(l); id != "" && !usedLayers[id] {
			s.removeLayerDir(id)
		}
	}
}
