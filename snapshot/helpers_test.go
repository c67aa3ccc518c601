package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/berth-sh/berth/image"
)

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mknod whiteouts, trusted.* xattrs, chown, overlay mounts)")
	}
}

func mustWrite(t testing.TB, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // umask
		t.Fatal(err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func whiteout(t testing.TB, p string) {
	t.Helper()
	must(t, unix.Mknod(p, unix.S_IFCHR, 0))
}

func setOpaque(t testing.TB, dir string) {
	t.Helper()
	must(t, unix.Setxattr(dir, xattrOpaque, []byte("y"), 0))
}

// describe lists every entry under root (not root itself) with what a
// restore must reproduce: type, permission bits, owner, content or link
// target, whiteout and opaque markers, mtimes (dirs too) and which names
// share an inode.
func describe(t testing.TB, root string, withMtime bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64][]string{}
	var walk func(rel string)
	walk = func(rel string) {
		full := filepath.Join(root, rel)
		ents, err := os.ReadDir(full)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			r := filepath.Join(rel, e.Name())
			p := filepath.Join(root, r)
			var st unix.Stat_t
			must(t, unix.Lstat(p, &st))
			d := fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode&0o7777, st.Uid, st.Gid)
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				d = "dir " + d
				var v [4]byte
				if n, err := unix.Lgetxattr(p, xattrOpaque, v[:]); err == nil {
					d += " opaque=" + string(v[:n])
				}
			case unix.S_IFREG:
				b, err := os.ReadFile(p)
				must(t, err)
				h := sha256.Sum256(b)
				d = fmt.Sprintf("file %s size=%d sha=%s", d, len(b), hex.EncodeToString(h[:6]))
				if st.Nlink > 1 {
					inodes[st.Ino] = append(inodes[st.Ino], r)
				}
			case unix.S_IFLNK:
				l, err := os.Readlink(p)
				must(t, err)
				d = "symlink -> " + l + fmt.Sprintf(" uid=%d", st.Uid)
			case unix.S_IFCHR:
				d = fmt.Sprintf("chr %d", st.Rdev)
			case unix.S_IFIFO:
				d = "fifo " + d
			case unix.S_IFSOCK:
				d = "socket"
			}
			if withMtime && st.Mode&unix.S_IFMT != unix.S_IFCHR {
				d += fmt.Sprintf(" mtime=%d.%09d", st.Mtim.Sec, st.Mtim.Nsec)
			}
			out[r] = d
			if e.IsDir() {
				walk(r)
			}
		}
	}
	walk("")
	for _, names := range inodes {
		if len(names) > 1 {
			sort.Strings(names)
			for _, n := range names {
				out[n] += " links=" + strings.Join(names, ",")
			}
		}
	}
	return out
}

func diffTrees(t testing.TB, want, got map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	bad := 0
	for _, k := range keys {
		if want[k] != got[k] {
			t.Errorf("%q:\n  want %q\n  got  %q", k, want[k], got[k])
			bad++
		}
	}
	if bad > 0 {
		t.FailNow()
	}
}

func decompress(t testing.TB, b []byte) []byte {
	t.Helper()
	d, err := zstd.NewReader(bytes.NewReader(b))
	must(t, err)
	defer d.Close()
	out, err := io.ReadAll(d)
	must(t, err)
	return out
}

func compress(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	e, err := zstd.NewWriter(&buf)
	must(t, err)
	_, err = e.Write(b)
	must(t, err)
	must(t, e.Close())
	return buf.Bytes()
}

// tarEntries lists the tar stream's headers.
func tarEntries(t testing.TB, raw []byte) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		must(t, err)
		if _, dup := out[h.Name]; dup {
			t.Fatalf("duplicate tar entry %q", h.Name)
		}
		out[h.Name] = h
	}
}

// capture runs Capture into memory and checks the stats against the bytes.
func capture(t testing.TB, layers []string, opts CaptureOptions) ([]byte, CaptureStats) {
	t.Helper()
	var buf bytes.Buffer
	var st CaptureStats
	var err error
	if len(layers) == 1 {
		st, err = Capture(context.Background(), layers[0], &buf, opts)
	} else {
		st, err = Squash(context.Background(), layers, &buf, opts)
	}
	must(t, err)
	sum := sha256.Sum256(buf.Bytes())
	if st.SHA256 != hex.EncodeToString(sum[:]) || st.CompressedBytes != int64(buf.Len()) {
		t.Fatalf("stats %+v do not match the %d written bytes (sha %x)", st, buf.Len(), sum)
	}
	return buf.Bytes(), st
}

// unpackTo restores a captured blob with image.Unpack into a fresh dir.
func unpackTo(t testing.TB, blob []byte) string {
	t.Helper()
	dst := t.TempDir()
	must(t, image.Unpack(context.Background(), bytes.NewReader(decompress(t, blob)), dst, image.UnpackOptions{}))
	return dst
}

// mountOverlay mounts lowers (lowest first) with an optional upper; an
// empty upper makes a read-only overlay. Unmounted at cleanup.
func mountOverlay(t testing.TB, lowers []string, upper string) string {
	t.Helper()
	target := t.TempDir()
	ls := make([]string, len(lowers))
	for i, l := range lowers {
		ls[len(lowers)-1-i] = l
	}
	data := "lowerdir=" + strings.Join(ls, ":") + ",index=off"
	if upper != "" {
		work := filepath.Join(filepath.Dir(upper), filepath.Base(upper)+".work")
		must(t, os.MkdirAll(work, 0o755))
		data += ",upperdir=" + upper + ",workdir=" + work
	}
	must(t, unix.Mount("overlay", target, "overlay", 0, data))
	t.Cleanup(func() { unmount(target) })
	return target
}

func unmount(target string) {
	for i := 0; i < 3; i++ {
		if err := unix.Unmount(target, 0); !errors.Is(err, unix.EBUSY) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type memBlobs map[string][]byte

func (m memBlobs) opener(key string, calls *int64) func(context.Context) (io.ReadCloser, error) {
	return func(context.Context) (io.ReadCloser, error) {
		if calls != nil {
			*calls++
		}
		b, ok := m[key]
		if !ok {
			return nil, os.ErrNotExist
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
}

func shaHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
