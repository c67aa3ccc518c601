package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/internal/errdefs"
)

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "images"))
	must(t, err)
	return s
}

func randomImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := random.Image(2048, 2)
	must(t, err)
	return img
}

// startRegistry serves an in-process registry on loopback; tamper, if set,
// may rewrite a response body.
func startRegistry(t *testing.T, tamper func(r *http.Request, body []byte) []byte) string {
	t.Helper()
	reg := registry.New(registry.Logger(nopLogger()))
	h := http.Handler(reg)
	if tamper != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			reg.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(tamper(r, rec.Body.Bytes()))
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t *testing.T, host, repo string, img v1.Image) string {
	t.Helper()
	ref := host + "/" + repo
	r, err := name.ParseReference(ref)
	must(t, err)
	must(t, remote.Write(r, img))
	return ref
}

func digestStr(t *testing.T, img v1.Image) string {
	d, err := img.Digest()
	must(t, err)
	return d.String()
}

func TestPullResolveListRemove(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	host := startRegistry(t, nil)
	src := randomImage(t)
	ref := push(t, host, "test/img:v1", src)

	s := openStore(t)
	var events []api.Progress
	img, err := s.Pull(ctx, ref, "myimg", func(p api.Progress) { events = append(events, p) })
	must(t, err)
	if img.Digest != digestStr(t, src) {
		t.Fatalf("digest %s, want %s", img.Digest, digestStr(t, src))
	}
	if len(img.Layers) != 2 || img.Name != "myimg" || img.Size <= 0 {
		t.Errorf("image = %+v", img)
	}
	if last := events[len(events)-1]; !last.Done || last.Image == nil || last.Image.Digest != img.Digest {
		t.Errorf("last progress event = %+v", last)
	}
	sawBytes := false
	for _, e := range events {
		sawBytes = sawBytes || (e.Total > 0 && e.Current == e.Total)
	}
	if !sawBytes {
		t.Errorf("no per-layer byte progress in %+v", events)
	}

	dirs, err := s.LayerDirs(ctx, img)
	must(t, err)
	if len(dirs) != 2 {
		t.Fatalf("dirs = %v", dirs)
	}
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil || len(ents) == 0 {
			t.Errorf("layer dir %s empty: %v", d, err)
		}
		if len(d) > len(s.Root())+20 {
			t.Errorf("layer dir path %q is long", d)
		}
	}

	for _, q := range []string{"myimg", img.Digest, img.Digest[:19], strings.TrimPrefix(img.Digest, "sha256:")[:12], ref} {
		got, err := s.Resolve(ctx, q)
		if err != nil || got.Digest != img.Digest {
			t.Errorf("Resolve(%q) = %v, %v", q, got, err)
		}
	}
	if _, err := s.Resolve(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "berth image pull") {
		t.Errorf("Resolve(nope) = %v", err)
	}

	// Pulling again is idempotent; a second name shows up in List.
	must(t, s.Tag(ctx, "other:v2", img.Digest))
	if err := s.Tag(ctx, "Bad Name", img.Digest); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad name accepted: %v", err)
	}
	list, err := s.List(ctx)
	must(t, err)
	if len(list) != 2 || list[0].Name != "myimg" || list[1].Name != "other:v2" || list[0].Layers != 2 {
		t.Errorf("List = %+v", list)
	}

	// A reopened store sees the same index.
	s2, err := Open(s.Root())
	must(t, err)
	if got, err := s2.Resolve(ctx, "other:v2"); err != nil || got.Digest != img.Digest {
		t.Errorf("reopened Resolve = %v, %v", got, err)
	}

	// In use: removal by digest refused, untagging allowed.
	s.InUse = func(d string) bool { return d == img.Digest }
	if err := s.Remove(ctx, img.Digest); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Remove in-use = %v", err)
	}
	must(t, s.Remove(ctx, "other:v2"))
	if _, err := s.Resolve(ctx, "other:v2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("name survived removal: %v", err)
	}
	s.InUse = nil
	must(t, s.Remove(ctx, img.Digest))
	for _, q := range []string{"myimg", ref, img.Digest} {
		if _, err := s.Resolve(ctx, q); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Resolve(%q) after remove = %v", q, err)
		}
	}
	for _, sub := range []string{"blobs/sha256", "l"} {
		if ents, _ := os.ReadDir(filepath.Join(s.Root(), sub)); len(ents) != 0 {
			t.Errorf("%s not garbage collected: %d entries", sub, len(ents))
		}
	}
}

func TestPullTamperedBlobRejected(t *testing.T) {
	needRoot(t)
	src := randomImage(t)
	layers, err := src.Layers()
	must(t, err)
	bad, err := layers[1].Digest()
	must(t, err)
	host := startRegistry(t, func(r *http.Request, body []byte) []byte {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+bad.String()) && len(body) > 100 {
			body = append([]byte(nil), body...)
			body[len(body)/2] ^= 0xff
		}
		return body
	})
	ref := push(t, host, "test/img:v1", src)
	s := openStore(t)
	if _, err := s.Pull(context.Background(), ref, "x", nil); err == nil {
		t.Fatal("pull of a tampered layer succeeded")
	}
	if s.hasBlob(bad.String()) {
		t.Error("tampered blob stored")
	}
	if _, err := s.Resolve(context.Background(), "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("image visible after failed pull: %v", err)
	}

	// Negative control: the same registry without tampering serves a good image.
	host2 := startRegistry(t, func(_ *http.Request, b []byte) []byte { return b })
	ref2 := push(t, host2, "test/img:v1", src)
	if _, err := s.Pull(context.Background(), ref2, "x", nil); err != nil {
		t.Fatalf("untampered pull: %v", err)
	}
}

func TestPullNotFound(t *testing.T) {
	host := startRegistry(t, nil)
	s := openStore(t)
	_, err := s.Pull(context.Background(), host+"/no/such:tag", "", nil)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("err = %v, want not found", err)
	}
}

func TestImportDockerSave(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	src, err := mutate.Config(randomImage(t), v1.Config{Labels: map[string]string{"org.example.team": "app"}})
	must(t, err)
	tag, err := name.NewTag("example.com/team/app:1.0")
	must(t, err)
	var buf bytes.Buffer
	must(t, tarball.Write(tag, src, &buf))

	s := openStore(t)
	img, err := s.Import(ctx, &buf, "app", nil)
	must(t, err)
	srcCfg, _ := src.ConfigName()
	rec := s.idx.Images[img.Digest]
	if rec.ConfigD != srcCfg.String() || len(img.Layers) != 2 {
		t.Errorf("config %s (want %s), layers %v", rec.ConfigD, srcCfg, img.Layers)
	}
	for _, q := range []string{"app", "example.com/team/app:1.0"} {
		if got, err := s.Resolve(ctx, q); err != nil || got.Digest != img.Digest {
			t.Errorf("Resolve(%q) = %v, %v", q, got, err)
		}
	}
	dirs, err := s.LayerDirs(ctx, img)
	must(t, err)
	if len(dirs) != 2 {
		t.Errorf("dirs = %v", dirs)
	}
	// Labels reach the wire form both ways an image is listed.
	list, err := s.List(ctx)
	must(t, err)
	if len(list) == 0 || list[0].Labels["org.example.team"] != "app" || img.APIImage().Labels["org.example.team"] != "app" {
		t.Errorf("labels lost: list %+v, image %+v", list, img.APIImage())
	}
}

// TestImportDockerSaveTampered: docker save layers carry no digest, so a
// swapped layer is caught only by the config's diff ids.
func TestImportDockerSaveTampered(t *testing.T) {
	needRoot(t)
	good := mkTar(t, file("a", "good"))
	evil := mkTar(t, file("a", "evil"))
	sum := sha256.Sum256(good)
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	mk := func(layer []byte) []byte {
		man, _ := json.Marshal([]dockerManifest{{Config: "cfg.json", Layers: []string{"l/layer.tar"}}})
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, f := range []struct {
			n string
			b []byte
		}{{"manifest.json", man}, {"cfg.json", cfg}, {"l/layer.tar", layer}} {
			tw.WriteHeader(&tar.Header{Name: f.n, Mode: 0o644, Size: int64(len(f.b)), Typeflag: tar.TypeReg})
			tw.Write(f.b)
		}
		tw.Close()
		return buf.Bytes()
	}
	s := openStore(t)
	_, err := s.Import(context.Background(), bytes.NewReader(mk(evil)), "evil", nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "diff id") {
		t.Errorf("tampered import: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Root(), "l")); len(ents) != 0 {
		t.Errorf("tampered layer left unpacked: %v", ents)
	}
	// Negative control: the untampered tarball imports.
	img, err := s.Import(context.Background(), bytes.NewReader(mk(good)), "good", nil)
	must(t, err)
	dirs, err := s.LayerDirs(context.Background(), img)
	must(t, err)
	wantContent(t, filepath.Join(dirs[0], "a"), "good")
}

func ociLayoutTar(t *testing.T, img v1.Image, mutate func(dir string)) []byte {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	must(t, err)
	must(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": "example.com/oci/app:2",
	})))
	if mutate != nil {
		mutate(dir)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		must(t, err)
		rel, _ := filepath.Rel(dir, path)
		if rel == "." {
			return nil
		}
		hdr, _ := tar.FileInfoHeader(fi, "")
		hdr.Name = rel
		must(t, tw.WriteHeader(hdr))
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(path)
			tw.Write(b)
		}
		return nil
	})
	must(t, tw.Close())
	return buf.Bytes()
}

func TestImportOCILayout(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	src := randomImage(t)
	s := openStore(t)
	img, err := s.Import(ctx, bytes.NewReader(ociLayoutTar(t, src, nil)), "", nil)
	must(t, err)
	if img.Digest != digestStr(t, src) {
		t.Errorf("digest %s, want %s", img.Digest, digestStr(t, src))
	}
	if got, err := s.Resolve(ctx, "example.com/oci/app:2"); err != nil || got.Digest != img.Digest {
		t.Errorf("Resolve by annotation ref = %v, %v", got, err)
	}

	// A flipped byte in a layer blob is refused.
	layers, _ := src.Layers()
	ld, _ := layers[0].Digest()
	tampered := ociLayoutTar(t, src, func(dir string) {
		p := filepath.Join(dir, "blobs", "sha256", ld.Hex)
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0xff
		os.WriteFile(p, b, 0o644)
	})
	s2 := openStore(t)
	if _, err := s2.Import(ctx, bytes.NewReader(tampered), "t", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("tampered OCI import: %v", err)
	}
	if s2.hasBlob(ld.String()) {
		t.Error("tampered blob stored")
	}
}

func TestImportGarbage(t *testing.T) {
	s := openStore(t)
	for _, in := range [][]byte{[]byte("not a tar"), mkTar(t, file("hello", "x"))} {
		if _, err := s.Import(context.Background(), bytes.NewReader(in), "", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Import(garbage) = %v", err)
		}
	}
}

// TestLayerDirsConcurrent: many goroutines asking for the same missing
// layers unpack each once and all get the same complete dirs.
func TestLayerDirsConcurrent(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	s := openStore(t)
	var buf bytes.Buffer
	tag, _ := name.NewTag("x/y:z")
	must(t, tarball.Write(tag, randomImage(t), &buf))
	img, err := s.Import(ctx, &buf, "c", nil)
	must(t, err)
	must(t, os.RemoveAll(filepath.Join(s.Root(), "l")))
	must(t, os.Mkdir(filepath.Join(s.Root(), "l"), 0o700))

	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs, err := s.LayerDirs(ctx, img)
			if err != nil {
				results[i] = "error: " + err.Error()
				return
			}
			results[i] = strings.Join(dirs, ":")
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r != results[0] || strings.HasPrefix(r, "error") {
			t.Fatalf("results differ: %q", results)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Root(), "tmp")); len(ents) != 0 {
		t.Errorf("temp dirs left: %d", len(ents))
	}
}

func TestValidateName(t *testing.T) {
	for _, n := range []string{"debian-trixie", "a", "node:20", "x.y_z-1:v1.2"} {
		if err := ValidateName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", "A", "-a", "a/b", "a:", ":x", "a b", "../x", strings.Repeat("a", 129)} {
		if ValidateName(n) == nil {
			t.Errorf("%q accepted", n)
		}
	}
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }
