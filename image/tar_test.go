package image

import (
	"archive/tar"
	"bytes"
	"os"
	"testing"
	"time"
)

// ent is one entry of a generated test tar.
type ent struct {
	name, link string
	typ        byte
	body       string
	mode       int64
	uid, gid   int
	major      int64
	minor      int64
	pax        map[string]string
}

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func hardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target, mode: 0o644}
}

var testTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func mkTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{
			Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, Size: int64(len(e.body)), ModTime: testTime,
			Devmajor: e.major, Devminor: e.minor, PAXRecords: e.pax, Format: tar.FormatPAX,
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown, mknod, trusted.* xattrs)")
	}
}
