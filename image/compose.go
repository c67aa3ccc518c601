package image

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Layer is one stored layer blob, as the image builder (package
// imagebuild) composes images from them.
type Layer struct {
	Blob   string `json:"blob"`   // compressed digest "sha256:..."
	DiffID string `json:"diffId"` // uncompressed digest
	Size   int64  `json:"size"`   // compressed bytes
}

// LayerList lists img's layers, lowest first.
func (img *Image) LayerList() []Layer {
	out := make([]Layer, len(img.Layers))
	for i := range img.Layers {
		out[i] = Layer{Blob: img.Layers[i], DiffID: img.DiffIDs[i]}
	}
	return out
}

// AddLayer stores the uncompressed tar stream gen writes as a zstd layer
// blob and returns it. The caller is responsible for the stream being a
// layer it means to ship (the builder writes it from a directory it made,
// or filters a captured one). The blob stays until garbage collection
// finds no image using it.
func (s *Store) AddLayer(ctx context.Context, gen func(w io.Writer) error) (Layer, error) {
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	lb, err := s.writeLayer(ctx, gen, nil)
	if err != nil {
		return Layer{}, err
	}
	return Layer{Blob: lb.desc.Digest.String(), DiffID: lb.diffID, Size: lb.desc.Size}, nil
}

// AddDirLayer stores dir (trusted: the caller made it) as a layer whose
// entries are dir's contents, relative to its root.
func (s *Store) AddDirLayer(ctx context.Context, dir string) (Layer, error) {
	return s.AddLayer(ctx, func(w io.Writer) error { return tarDir(ctx, dir, w) })
}

// HasLayer reports whether l's blob is still in the store.
func (s *Store) HasLayer(l Layer) bool {
	if !digestRe.MatchString(l.Blob) {
		return false
	}
	_, err := os.Stat(s.blobPath(l.Blob))
	return err == nil
}

// ConfigFile returns the full OCI config of a stored image (Config is only
// the part a start needs).
func (s *Store) ConfigFile(ctx context.Context, img *Image) (*v1.ConfigFile, error) {
	s.mu.Lock()
	rec := s.idx.Images[img.Digest]
	s.mu.Unlock()
	if rec == nil {
		return nil, notFound(img.Digest)
	}
	raw, err := s.readBlob(rec.ConfigD, maxConfigBytes)
	if err != nil {
		return nil, err
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, errdefs.InvalidArgument("bad image config: %w", err)
	}
	return cf, nil
}

// Compose records an image made of stored layers (lowest first) and cf,
// whose RootFS it fills in. nm may be empty (an intermediate image of a
// build). The layers are unpacked and verified against their diff ids
// like any ingested image's.
func (s *Store) Compose(ctx context.Context, layers []Layer, cf v1.ConfigFile, nm string, progress func(api.Progress)) (*Image, error) {
	if nm != "" {
		if err := ValidateName(nm); err != nil {
			return nil, err
		}
	}
	if len(layers) > maxLayers {
		return nil, errdefs.InvalidArgument("the image would have %d layers; at most %d are supported (merge RUN steps)", len(layers), maxLayers)
	}
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.RootFS = v1.RootFS{Type: "layers"}
	descs := make([]v1.Descriptor, 0, len(layers))
	for _, l := range layers {
		if !s.HasLayer(l) {
			return nil, errdefs.NotFound("layer blob %s is missing from the image store", l.Blob)
		}
		h, err := v1.NewHash(l.Blob)
		if err != nil {
			return nil, errdefs.InvalidArgument("layer %q: %w", l.Blob, err)
		}
		d, err := v1.NewHash(l.DiffID)
		if err != nil {
			return nil, errdefs.InvalidArgument("layer diff id %q: %w", l.DiffID, err)
		}
		f, err := os.Open(s.blobPath(l.Blob))
		if err != nil {
			return nil, err
		}
		mt := layerMediaType(f)
		fi, err := f.Stat()
		f.Close()
		if err != nil {
			return nil, err
		}
		if mt == types.OCIUncompressedLayer {
			mt = types.OCILayer // never: writeLayer compresses; keep a valid type
		}
		descs = append(descs, v1.Descriptor{MediaType: mt, Digest: h, Size: fi.Size()})
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, d)
	}
	raw, err := json.Marshal(&cf)
	if err != nil {
		return nil, err
	}
	mraw, err := s.buildManifest(ctx, raw, descs)
	if err != nil {
		return nil, err
	}
	return s.commit(ctx, mraw, "", nm, &reporter{fn: progress})
}

// Decompress returns the tar stream of r (gzip, zstd, bzip2 or plain, by
// magic bytes) and a func that releases the decoder.
func Decompress(r io.Reader) (io.Reader, func(), error) { return decompress(r) }
