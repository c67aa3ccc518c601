package image

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const (
	maxManifestBytes = 4 << 20
	maxConfigBytes   = 8 << 20
	maxLayers        = 127 // overlayfs stacks at most ~500 lowers; keep headroom for snapshots
)

// reporter throttles progress events; a nil func is a no-op.
type reporter struct {
	fn   func(api.Progress)
	last time.Time
}

func (p *reporter) msg(format string, args ...any) {
	if p.fn != nil {
		p.fn(api.Progress{Message: fmt.Sprintf(format, args...)})
	}
}

func (p *reporter) bytes(msg string, cur, total int64) {
	if p.fn == nil {
		return
	}
	if now := time.Now(); cur == total || now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		p.fn(api.Progress{Message: msg, Current: cur, Total: total})
	}
}

func (p *reporter) done(img *Image) {
	if p.fn != nil {
		ai := img.APIImage()
		p.fn(api.Progress{Message: "stored " + img.Digest, Done: true, Image: &ai})
	}
}

// commit records an image whose manifest, config and layer blobs are all
// in the blob store: it checks the config matches the manifest, unpacks
// every layer (verifying each diff id), and only then makes the image
// visible under its digest, ref and name.
func (s *Store) commit(ctx context.Context, rawManifest []byte, ref, nm string, rep *reporter) (*Image, error) {
	digest := digestOf(rawManifest)
	m, err := v1.ParseManifest(bytes.NewReader(rawManifest))
	if err != nil {
		return nil, errdefs.InvalidArgument("bad image manifest: %w", err)
	}
	if len(m.Layers) > maxLayers {
		return nil, errdefs.InvalidArgument("image has %d layers; at most %d are supported", len(m.Layers), maxLayers)
	}
	rawConfig, err := s.readBlob(m.Config.Digest.String(), maxConfigBytes)
	if err != nil {
		return nil, err
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(rawConfig))
	if err != nil {
		return nil, errdefs.InvalidArgument("bad image config: %w", err)
	}
	if (cf.OS != "" && cf.OS != "linux") || (cf.Architecture != "" && cf.Architecture != "amd64") {
		return nil, errdefs.InvalidArgument("image is for %s/%s; this host runs linux/amd64", cf.OS, cf.Architecture)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, errdefs.InvalidArgument("image config lists %d diff ids for %d layers", len(cf.RootFS.DiffIDs), len(m.Layers))
	}
	if _, err := s.writeBlobBytes(ctx, rawManifest, digest); err != nil {
		return nil, err
	}
	img := &Image{Digest: digest, Ref: ref, Name: nm, CreatedAt: time.Now().UTC()}
	img.Config = Config{
		Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Labels: cf.Config.Labels,
	}
	for i, l := range m.Layers {
		if !digestRe.MatchString(l.Digest.String()) || !digestRe.MatchString(cf.RootFS.DiffIDs[i].String()) {
			return nil, errdefs.InvalidArgument("layer %d has an unsupported digest", i)
		}
		img.Layers = append(img.Layers, l.Digest.String())
		img.DiffIDs = append(img.DiffIDs, cf.RootFS.DiffIDs[i].String())
		img.Size += l.Size
	}
	for i := range img.Layers {
		rep.msg("unpacking layer %d/%d %s", i+1, len(img.Layers), img.Layers[i])
		if _, err := s.ensureLayer(ctx, img.Layers[i], img.DiffIDs[i]); err != nil {
			return nil, fmt.Errorf("layer %s: %w", img.Layers[i], err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.idx.Images[digest]
	if rec == nil {
		rec = &record{Image: *img, Manifest: digest, ConfigD: m.Config.Digest.String()}
		rec.Name = ""
		s.idx.Images[digest] = rec
	} else if ref != "" {
		rec.Ref = ref
	}
	if ref != "" {
		s.idx.Refs[ref] = digest
	}
	if nm != "" {
		s.idx.Names[nm] = digest
	}
	if err := s.saveLocked(); err != nil {
		return nil, err
	}
	img.CreatedAt, img.Ref = rec.CreatedAt, rec.Ref
	if img.Name == "" {
		img.Name = s.firstNameLocked(digest)
	}
	rep.done(img)
	return img, nil
}

// layerBlob is one layer written by writeLayer.
type layerBlob struct {
	desc   v1.Descriptor
	diffID string
}

// writeLayer stores the tar stream that gen writes, zstd-compressed, and
// returns its descriptor and diff id. zstd because it decompresses several
// times faster than gzip, and restoring (unpacking) is the hot path.
func (s *Store) writeLayer(ctx context.Context, gen func(w io.Writer) error, onBytes func(int64)) (layerBlob, error) {
	pr, pw := io.Pipe()
	h := sha256.New()
	go func() {
		zw, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2))
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		err = gen(io.MultiWriter(zw, h))
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		pw.CloseWithError(err)
	}()
	d, n, err := s.writeBlob(ctx, pr, "", onBytes)
	pr.CloseWithError(fmt.Errorf("blob writer stopped"))
	if err != nil {
		return layerBlob{}, err
	}
	hash, _ := v1.NewHash(d)
	return layerBlob{
		desc:   v1.Descriptor{MediaType: types.OCILayerZStd, Digest: hash, Size: n},
		diffID: "sha256:" + hex.EncodeToString(h.Sum(nil)),
	}, nil
}

// buildManifest writes config and returns an OCI manifest for it and the
// layers (all already stored).
func (s *Store) buildManifest(ctx context.Context, rawConfig []byte, layers []v1.Descriptor) ([]byte, error) {
	cd, err := s.writeBlobBytes(ctx, rawConfig, digestOf(rawConfig))
	if err != nil {
		return nil, err
	}
	hash, _ := v1.NewHash(cd)
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        v1.Descriptor{MediaType: types.OCIConfigJSON, Digest: hash, Size: int64(len(rawConfig))},
		Layers:        layers,
	}
	if m.Layers == nil {
		m.Layers = []v1.Descriptor{}
	}
	return json.Marshal(&m)
}

// layerMediaType names a stored layer by its actual compression.
func layerMediaType(head io.Reader) types.MediaType {
	buf := make([]byte, 4)
	n, _ := io.ReadFull(head, buf)
	buf = buf[:n]
	switch {
	case bytes.HasPrefix(buf, gzipMagic):
		return types.OCILayer
	case bytes.HasPrefix(buf, zstdMagic):
		return types.OCILayerZStd
	default:
		return types.OCIUncompressedLayer
	}
}
