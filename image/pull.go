package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

// Pull fetches ref (linux/amd64 from a multi-platform index), stores it by
// manifest digest, unpacks its layers and, if nm is set, names it. Every
// blob is verified against its digest before it is stored. Plain HTTP is
// used only for loopback registries (localhost, 127.0.0.0/8, [::1]).
func (s *Store) Pull(ctx context.Context, ref, nm string, progress func(api.Progress)) (*Image, error) {
	if nm != "" {
		if err := ValidateName(nm); err != nil {
			return nil, err
		}
	}
	var opts []name.Option
	if isLoopbackRegistry(ref) {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, errdefs.InvalidArgument("invalid image reference %q: %w", ref, err)
	}
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	rep := &reporter{fn: progress}
	rep.msg("resolving %s", r.Name())
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
	}
	img, err := remote.Image(r, ropts...)
	if err != nil {
		return nil, registryError(ref, err)
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, registryError(ref, err)
	}
	if len(rawManifest) > maxManifestBytes {
		return nil, errdefs.InvalidArgument("manifest of %s is too large", ref)
	}
	if d, ok := r.(name.Digest); ok && d.DigestStr() != digestOf(rawManifest) {
		return nil, errdefs.InvalidArgument("registry returned a manifest that does not match %s", d.DigestStr())
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, errdefs.InvalidArgument("bad manifest for %s: %w", ref, err)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, registryError(ref, err)
	}
	if _, err := s.writeBlobBytes(ctx, rawConfig, m.Config.Digest.String()); err != nil {
		return nil, err
	}
	for i, l := range m.Layers {
		ld := l.Digest.String()
		if s.hasBlob(ld) {
			continue
		}
		if !digestRe.MatchString(ld) {
			return nil, errdefs.InvalidArgument("layer %d has unsupported digest %q", i, ld)
		}
		layer, err := remote.Layer(r.Context().Digest(ld), ropts...)
		if err != nil {
			return nil, registryError(ref, err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			return nil, registryError(ref, err)
		}
		msg := fmt.Sprintf("layer %d/%d %s", i+1, len(m.Layers), ld)
		_, _, err = s.writeBlob(ctx, rc, ld, func(n int64) { rep.bytes(msg, n, l.Size) })
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	stored, err := s.commit(ctx, rawManifest, r.Name(), nm, rep)
	if err != nil {
		return nil, err
	}
	return s.published(ctx, stored, nm, rep)
}

func registryError(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
				return errdefs.NotFound("image %q not found in the registry: %w", ref, err)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return errdefs.PermissionDenied("registry refused access to %q: %w", ref, err)
			}
		}
		if te.StatusCode == 404 {
			return errdefs.NotFound("image %q not found in the registry: %w", ref, err)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errdefs.Unavailable("pull %s: %w", ref, err)
}

// isLoopbackRegistry reports whether ref's registry host is loopback, the
// only case where plain HTTP is acceptable (nothing on the path to
// tamper with the traffic).
func isLoopbackRegistry(ref string) bool {
	i := strings.IndexByte(ref, '/')
	if i < 0 {
		return false
	}
	host := ref[:i]
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
