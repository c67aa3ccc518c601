package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/internal/errdefs"
)

func writeImage(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPackVerifyUnpack(t *testing.T) {
	img := writeImage(t, map[string]string{"pages-1.img": strings.Repeat("x", 5000), "core-1.img": "core"})
	if err := writeMeta(img, CheckpointMeta{ID: "s1", CPUFlags: []string{"sse2"}}); err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	digest, size, err := pack(img, store)
	if err != nil {
		t.Fatal(err)
	}
	if !digestRE.MatchString(digest) || size < 5000 {
		t.Fatalf("digest %s size %d", digest, size)
	}
	p, err := verifyPack(store, digest)
	if err != nil {
		t.Fatalf("untampered pack refused: %v", err)
	}
	out := t.TempDir()
	if err := unpack(p, out); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "pages-1.img")); len(b) != 5000 {
		t.Fatalf("pages-1.img has %d bytes after unpack", len(b))
	}
	if m, err := readMeta(out); err != nil || m.ID != "s1" {
		t.Fatalf("meta %+v %v", m, err)
	}

	// One flipped byte in the pack: refused before anything reads it.
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = verifyPack(store, digest)
	if !errdefs.IsKind(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "tampered") {
		t.Fatalf("tampered pack: %v, want invalid_argument saying tampered", err)
	}
	// A digest that is not one, and one with no pack.
	if _, err := verifyPack(store, "sha256:../../etc"); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad digest: %v", err)
	}
	if _, err := verifyPack(store, "sha256:"+strings.Repeat("0", 64)); !errdefs.IsKind(err, errdefs.ErrNotFound) {
		t.Fatalf("missing pack: %v", err)
	}
}

func TestUnpackRefusesPaths(t *testing.T) {
	img := writeImage(t, map[string]string{"a.img": "a"})
	store := t.TempDir()
	digest, _, err := pack(img, store)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := packPath(store, digest)
	// Rewrite the entry's name to a path: unpack refuses it.
	b, _ := os.ReadFile(p)
	copy(b, "../x.img")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unpack(p, t.TempDir()); !errdefs.IsKind(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unpack of a path entry: %v, want invalid_argument", err)
	}
}

func TestCPUCompatible(t *testing.T) {
	m := CheckpointMeta{ID: "s1", CPUModel: "x", CPUFlags: []string{"avx2", "sse2"}}
	if err := cpuCompatible(m, []string{"sse2", "avx2", "avx512f"}); err != nil {
		t.Fatalf("superset host refused: %v", err)
	}
	err := cpuCompatible(m, []string{"sse2"})
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "avx2") {
		t.Fatalf("host without avx2: %v", err)
	}
	_, flags, err := hostCPU()
	if err != nil || len(flags) == 0 {
		t.Fatalf("host cpu flags %v %v", flags, err)
	}
}

func TestGVisorCheckpointRefused(t *testing.T) {
	r := &OCI{Binary: "runsc", Root: t.TempDir(), StartVia: []string{"x"}}
	_, _, err := r.Checkpoint(t.Context(), "s1", t.TempDir(), CheckpointOptions{})
	if !errdefs.IsKind(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "gVisor") {
		t.Fatalf("gVisor checkpoint: %v", err)
	}
	if _, err := r.Restore(t.Context(), "s1", t.TempDir(), t.TempDir(), RestoreOptions{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("gVisor restore: %v", err)
	}
}
