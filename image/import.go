package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

const maxImportEntries = 100_000

// Import stores the image in a `docker save` tarball or an OCI-layout
// tarball read from r. The stream is spooled to a temp file first (both
// formats need random access), then read in place: nothing from the
// tarball is ever extracted to the filesystem by name. An OCI layout is
// recognised by index.json, a docker save by manifest.json (newer docker
// saves carry both and are read as OCI layouts). Blobs are verified by
// digest, and docker-save layers, which have none, by their config diff ids
// when unpacked.
func (s *Store) Import(ctx context.Context, r io.Reader, nm string, progress func(api.Progress)) (*Image, error) {
	if nm != "" {
		if err := ValidateName(nm); err != nil {
			return nil, err
		}
	}
	s.gcMu.RLock()
	defer s.gcMu.RUnlock()
	rep := &reporter{fn: progress}
	spool, err := os.CreateTemp(filepath.Join(s.root, "tmp"), "import-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(spool.Name())
	defer spool.Close()
	n, err := io.CopyBuffer(spool, ctxReader{ctx, r}, make([]byte, 256<<10))
	if err != nil {
		return nil, fmt.Errorf("read import stream: %w", err)
	}
	rep.msg("received %d bytes", n)
	ta, err := indexTar(spool)
	if err != nil {
		return nil, err
	}
	var raw []byte
	var ref string
	switch {
	case ta.has("index.json"):
		raw, ref, err = s.importOCI(ctx, ta, rep)
	case ta.has("manifest.json"):
		raw, ref, err = s.importDocker(ctx, ta, rep)
	default:
		return nil, errdefs.InvalidArgument("not an image tarball: neither index.json (OCI layout) nor manifest.json (docker save) found")
	}
	if err != nil {
		return nil, err
	}
	img, err := s.commit(ctx, raw, ref, nm, rep)
	if err != nil {
		return nil, err
	}
	return s.published(ctx, img, nm, rep)
}

// tarIndex maps the regular files of a tar to their byte ranges.
type tarIndex struct {
	f     *os.File
	files map[string]*io.SectionReader
}

func indexTar(f *os.File) (*tarIndex, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	t := &tarIndex{f: f, files: map[string]*io.SectionReader{}}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return nil, errdefs.InvalidArgument("malformed image tarball: %w", err)
		}
		if n > maxImportEntries {
			return nil, errdefs.InvalidArgument("image tarball has too many entries")
		}
		//lint:ignore SA1019 old archives still carry TypeRegA (NUL) for regular files
		if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA {
			continue
		}
		// Entries are read in place: the data starts at the current offset.
		off, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		t.files[cleanArchiveName(hdr.Name)] = io.NewSectionReader(f, off, hdr.Size)
	}
}

func cleanArchiveName(n string) string {
	return strings.TrimPrefix(path.Clean("/"+n), "/")
}

func (t *tarIndex) has(n string) bool { _, ok := t.files[n]; return ok }

func (t *tarIndex) open(n string) (*io.SectionReader, error) {
	sr, ok := t.files[cleanArchiveName(n)]
	if !ok {
		return nil, errdefs.InvalidArgument("image tarball lacks %q", n)
	}
	return io.NewSectionReader(sr, 0, sr.Size()), nil
}

func (t *tarIndex) readSmall(n string, max int64) ([]byte, error) {
	sr, err := t.open(n)
	if err != nil {
		return nil, err
	}
	if sr.Size() > max {
		return nil, errdefs.InvalidArgument("%q in the image tarball is too large", n)
	}
	return io.ReadAll(sr)
}

func blobName(d v1.Hash) string { return "blobs/" + d.Algorithm + "/" + d.Hex }

// importOCI copies the one linux/amd64 image of an OCI layout into the
// store and returns its raw manifest and ref annotation.
func (s *Store) importOCI(ctx context.Context, ta *tarIndex, rep *reporter) ([]byte, string, error) {
	raw, err := ta.readSmall("index.json", maxManifestBytes)
	if err != nil {
		return nil, "", err
	}
	desc, err := pickManifest(ta, raw, 0)
	if err != nil {
		return nil, "", err
	}
	mraw, err := ta.readSmall(blobName(desc.Digest), maxManifestBytes)
	if err != nil {
		return nil, "", err
	}
	if digestOf(mraw) != desc.Digest.String() {
		return nil, "", errdefs.InvalidArgument("manifest blob does not match its digest %s", desc.Digest)
	}
	m, err := v1.ParseManifest(bytes.NewReader(mraw))
	if err != nil {
		return nil, "", errdefs.InvalidArgument("bad manifest: %w", err)
	}
	blobs := append([]v1.Descriptor{m.Config}, m.Layers...)
	for i, b := range blobs {
		sr, err := ta.open(blobName(b.Digest))
		if err != nil {
			return nil, "", err
		}
		msg := fmt.Sprintf("blob %d/%d %s", i+1, len(blobs), b.Digest)
		if _, _, err := s.writeBlob(ctx, sr, b.Digest.String(), func(n int64) { rep.bytes(msg, n, sr.Size()) }); err != nil {
			return nil, "", err
		}
	}
	ref := desc.Annotations["io.containerd.image.name"]
	if ref == "" {
		ref = desc.Annotations["org.opencontainers.image.ref.name"]
		if normalizeRef(ref) == "" || !strings.ContainsAny(ref, "/:") {
			ref = "" // a bare tag such as "latest" is not a reference
		}
	}
	if ref != "" {
		ref = normalizeRef(ref)
	}
	return mraw, ref, nil
}

// pickManifest chooses the image manifest in an index: the only one, or
// the only linux/amd64 one; nested indexes are followed one level.
func pickManifest(ta *tarIndex, raw []byte, depth int) (v1.Descriptor, error) {
	idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return v1.Descriptor{}, errdefs.InvalidArgument("bad OCI index: %w", err)
	}
	var cands []v1.Descriptor
	seen := map[string]bool{}
	for _, d := range idx.Manifests {
		if d.Platform != nil && (d.Platform.OS != "linux" || d.Platform.Architecture != "amd64") {
			continue
		}
		switch {
		case d.MediaType.IsImage():
			if !seen[d.Digest.String()] {
				seen[d.Digest.String()] = true
				cands = append(cands, d)
			}
		case d.MediaType.IsIndex() && depth == 0:
			sub, err := ta.readSmall(blobName(d.Digest), maxManifestBytes)
			if err != nil {
				return v1.Descriptor{}, err
			}
			if digestOf(sub) != d.Digest.String() {
				return v1.Descriptor{}, errdefs.InvalidArgument("index blob does not match its digest %s", d.Digest)
			}
			c, err := pickManifest(ta, sub, depth+1)
			if err != nil {
				return v1.Descriptor{}, err
			}
			if c.Annotations == nil {
				c.Annotations = d.Annotations
			}
			if !seen[c.Digest.String()] {
				seen[c.Digest.String()] = true
				cands = append(cands, c)
			}
		}
	}
	switch len(cands) {
	case 0:
		return v1.Descriptor{}, errdefs.InvalidArgument("no linux/amd64 image in the OCI layout")
	case 1:
		return cands[0], nil
	default:
		return v1.Descriptor{}, errdefs.InvalidArgument("the tarball holds %d images; import one at a time", len(cands))
	}
}

type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// importDocker stores a `docker save` image: the config as is, each layer
// as is when already compressed, else zstd-compressed; then it writes an
// OCI manifest for them.
func (s *Store) importDocker(ctx context.Context, ta *tarIndex, rep *reporter) ([]byte, string, error) {
	raw, err := ta.readSmall("manifest.json", maxManifestBytes)
	if err != nil {
		return nil, "", err
	}
	var ms []dockerManifest
	if err := json.Unmarshal(raw, &ms); err != nil {
		return nil, "", errdefs.InvalidArgument("bad manifest.json: %w", err)
	}
	if len(ms) != 1 {
		return nil, "", errdefs.InvalidArgument("the tarball holds %d images; import one at a time", len(ms))
	}
	dm := ms[0]
	if len(dm.Layers) > maxLayers {
		return nil, "", errdefs.InvalidArgument("image has too many layers")
	}
	rawConfig, err := ta.readSmall(dm.Config, maxConfigBytes)
	if err != nil {
		return nil, "", err
	}
	var descs []v1.Descriptor
	for i, lp := range dm.Layers {
		sr, err := ta.open(lp)
		if err != nil {
			return nil, "", err
		}
		msg := fmt.Sprintf("layer %d/%d", i+1, len(dm.Layers))
		onBytes := func(n int64) { rep.bytes(msg, n, sr.Size()) }
		compressed, br, err := isCompressed(sr)
		if err != nil {
			return nil, "", err
		}
		if compressed {
			d, n, err := s.writeBlob(ctx, br, "", onBytes)
			if err != nil {
				return nil, "", err
			}
			f, err := os.Open(s.blobPath(d))
			if err != nil {
				return nil, "", err
			}
			mt := layerMediaType(f)
			f.Close()
			h, _ := v1.NewHash(d)
			descs = append(descs, v1.Descriptor{MediaType: mt, Digest: h, Size: n})
			continue
		}
		lb, err := s.writeLayer(ctx, func(w io.Writer) error {
			_, err := io.Copy(w, br)
			return err
		}, nil)
		if err != nil {
			return nil, "", err
		}
		rep.bytes(msg, sr.Size(), sr.Size())
		descs = append(descs, lb.desc)
	}
	mraw, err := s.buildManifest(ctx, rawConfig, descs)
	if err != nil {
		return nil, "", err
	}
	ref := ""
	if len(dm.RepoTags) > 0 {
		ref = normalizeRef(dm.RepoTags[0])
	}
	return mraw, ref, nil
}
