package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Push uploads the stored image src (a name, digest or reference, as
// Resolve takes) to a registry as ref, byte for byte: the same manifest,
// config and compressed layers, so the pushed image has the digest it has
// here (returned). Blobs the registry has already are not sent again.
// Plain HTTP is used only for loopback registries, as for Pull;
// credentials come from the docker keychain (~/.docker/config.json of the
// daemon's user).
func (s *Store) Push(ctx context.Context, src, ref string, progress func(api.Progress)) (string, error) {
	var opts []name.Option
	if isLoopbackRegistry(ref) {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return "", errdefs.InvalidArgument("invalid image reference %q: %w", ref, err)
	}
	s.gcMu.RLock() // the blobs stay while they are read
	defer s.gcMu.RUnlock()
	img, err := s.Resolve(ctx, src)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	rec := s.idx.Images[img.Digest]
	var configD string
	if rec != nil {
		configD = rec.ConfigD
	}
	s.mu.Unlock()
	if rec == nil {
		return "", notFound(src)
	}
	rawManifest, err := s.readBlob(img.Digest, maxManifestBytes)
	if err != nil {
		return "", err
	}
	rawConfig, err := s.readBlob(configD, maxConfigBytes)
	if err != nil {
		return "", err
	}
	m, err := v1.ParseManifest(bytes.NewReader(rawManifest))
	if err != nil {
		return "", errdefs.Internal("stored manifest of %s: %w", img.Digest, err)
	}
	core := &storedImage{s: s, manifest: m, rawManifest: rawManifest, rawConfig: rawConfig}
	vimg, err := partial.CompressedToImage(core)
	if err != nil {
		return "", err
	}
	rep := &reporter{fn: progress}
	rep.msg("pushing %s to %s", img.Digest, r.Name())
	updates := make(chan v1.Update, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for u := range updates {
			rep.bytes("uploading", u.Complete, u.Total)
		}
	}()
	err = remote.Write(r, vimg, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithProgress(updates))
	<-done
	if err != nil {
		return "", pushError(ref, err)
	}
	rep.msg("pushed %s as %s", img.Digest, r.Name())
	return img.Digest, nil
}

func pushError(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		for _, d := range te.Errors {
			switch d.Code {
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return errdefs.PermissionDenied("registry refused the push to %q: %w", ref, err)
			}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errdefs.Unavailable("push %s: %w", ref, err)
}

// storedImage is a stored image as go-containerregistry's compressed
// image core: its raw manifest and config, and its layers as the stored
// compressed blobs.
type storedImage struct {
	s           *Store
	manifest    *v1.Manifest
	rawManifest []byte
	rawConfig   []byte
}

func (i *storedImage) RawManifest() ([]byte, error)   { return i.rawManifest, nil }
func (i *storedImage) RawConfigFile() ([]byte, error) { return i.rawConfig, nil }

func (i *storedImage) MediaType() (types.MediaType, error) {
	if i.manifest.MediaType != "" {
		return i.manifest.MediaType, nil
	}
	return types.OCIManifestSchema1, nil
}

func (i *storedImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range i.manifest.Layers {
		if d.Digest == h {
			return &storedLayer{s: i.s, desc: d}, nil
		}
	}
	if i.manifest.Config.Digest == h {
		return &storedLayer{s: i.s, desc: i.manifest.Config}, nil
	}
	return nil, fmt.Errorf("blob %s is not part of the image", h)
}

type storedLayer struct {
	s    *Store
	desc v1.Descriptor
}

func (l *storedLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *storedLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *storedLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

func (l *storedLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.s.blobPath(l.desc.Digest.String()))
	if err != nil {
		return nil, errdefs.NotFound("blob %s missing from the image store: %w", l.desc.Digest, err)
	}
	return f, nil
}
